package validator

import (
	"fmt"
	"path"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Limits on rule conditions. A condition is short policy text, not a
// program: the bounds keep a hostile or careless policy from making every
// validation slow.
const (
	maxWhenBytes = 4096
	// maxWhenCost bounds the work of one evaluation of a condition that
	// iterates (all, exists, exists_one, map, filter), in CEL's cost units:
	// roughly one per operation, more for string and list work in
	// proportion to their size. An evaluation that would exceed it fails,
	// and a failing rule denies. A condition that does not iterate
	// evaluates each of its (at most a few thousand) nodes once over
	// arguments of bounded size, so it needs no meter, which would double
	// its cost.
	maxWhenCost = 100_000
)

// The variables a rule's `when` condition may use. Names with a dot are
// single qualified variables ("run.id"), so a misspelt field is a compile
// error, not a runtime one.
const (
	varTool       = "tool"
	varArgs       = "args"
	varGoal       = "goal"
	varConfidence = "confidence"
	varEffect     = "effect"
	varIdempotent = "idempotent"
	varNow        = "now"

	varRunID         = "run.id"
	varRunPrincipal  = "run.principal"
	varRunRoles      = "run.roles"
	varRunLabels     = "run.labels"
	varRunStep       = "run.step"
	varRunStepsUsed  = "run.steps_used"
	varRunErrors     = "run.consecutive_errors"
	varRunInTokens   = "run.input_tokens"
	varRunOutTokens  = "run.output_tokens"
	varRunTokens     = "run.tokens"
	varRunCost       = "run.cost_usd"
	varRunModel      = "run.model"
	varRunElapsed    = "run.elapsed"
	varCrewName      = "crew.name"
	varCrewAgent     = "crew.agent"
	varCrewAgentType = "crew.agent_type"
	varCrewHandedBy  = "crew.handed_by"
	varCrewPath      = "crew.handoff_path"
	effectNameRead   = "read"
	effectNameRev    = "reversible"
	effectNameIrrev  = "irreversible"
	celBoolResultMsg = "the condition must be a bool expression"
)

// newCELEnv builds the environment every condition is compiled in: the
// standard library, optional values (for confidence), the strings extension
// and the variables above. Numbers compare across int and double, because
// JSON arguments are doubles and policy authors write integers.
func newCELEnv() (*cel.Env, error) {
	env, err := cel.NewEnv(
		cel.Variable(varTool, cel.StringType),
		cel.Variable(varArgs, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varGoal, cel.StringType),
		cel.Variable(varConfidence, cel.OptionalType(cel.DoubleType)),
		cel.Variable(varEffect, cel.StringType),
		cel.Variable(varIdempotent, cel.BoolType),
		cel.Variable(varNow, cel.TimestampType),
		cel.Variable(varRunID, cel.StringType),
		cel.Variable(varRunPrincipal, cel.StringType),
		cel.Variable(varRunRoles, cel.ListType(cel.StringType)),
		cel.Variable(varRunLabels, cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable(varRunStep, cel.IntType),
		cel.Variable(varRunStepsUsed, cel.IntType),
		cel.Variable(varRunErrors, cel.IntType),
		cel.Variable(varRunInTokens, cel.IntType),
		cel.Variable(varRunOutTokens, cel.IntType),
		cel.Variable(varRunTokens, cel.IntType),
		cel.Variable(varRunCost, cel.DoubleType),
		cel.Variable(varRunModel, cel.StringType),
		cel.Variable(varRunElapsed, cel.DurationType),
		cel.Variable(varCrewName, cel.StringType),
		cel.Variable(varCrewAgent, cel.StringType),
		cel.Variable(varCrewAgentType, cel.StringType),
		cel.Variable(varCrewHandedBy, cel.StringType),
		cel.Variable(varCrewPath, cel.ListType(cel.StringType)),
		cel.OptionalTypes(),
		ext.Strings(),
		cel.Function("touches",
			cel.MemberOverload("string_touches_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(p, dir ref.Val) ref.Val {
					ps, ok1 := p.(types.String)
					ds, ok2 := dir.(types.String)
					if !ok1 || !ok2 {
						return types.MaybeNoSuchOverloadErr(p)
					}
					return types.Bool(pathTouches(string(ps), string(ds)))
				}))),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(maxWhenBytes),
	)
	if err != nil {
		return nil, fmt.Errorf("validator: CEL environment: %w", err)
	}
	return env, nil
}

// pathTouches is CEL's p.touches(dir): whether a tool acting on the
// workspace path p, a tree included (fs.delete with recursive, fs.move of
// a directory), acts on dir or anything in it: p is dir, inside it, or
// holds it. A rule on a directory written as a prefix check
// (args.from.matches("^deploy/prod(/|$)")) misses a move or delete of
// one of its parents (fs.move deploy → old, write old/prod/…, move it
// back): each step is allowed and the tree changed. Both are compared in
// clean form (path.Clean), so a path the executor would refuse as not
// clean is judged as the path it names (the safe side); "" touches
// nothing (a missing argument read as ""), "." everything.
func pathTouches(p, dir string) bool {
	if p == "" || dir == "" {
		return false
	}
	p, dir = path.Clean(p), path.Clean(dir)
	switch {
	case p == "." || dir == "." || p == dir:
		return true
	case strings.HasPrefix(p, dir+"/"), strings.HasPrefix(dir, p+"/"):
		return true
	}
	return false
}

// celEnv builds the CEL environment when a policy first needs it, once
// per load: a policy without conditions never pays for it. It is not safe
// for concurrent use; each load has its own.
type celEnv struct {
	env  *cel.Env
	err  error
	done bool
}

func (e *celEnv) get() (*cel.Env, error) {
	if !e.done {
		e.env, e.err = newCELEnv()
		e.done = true
	}
	return e.env, e.err
}

// condition is a rule's compiled `when`.
type condition struct {
	// src is the expression as written.
	src string
	// prog evaluates it; safe for concurrent use.
	prog cel.Program
	// canonical is the checked expression printed back, so two conditions
	// written differently but parsed the same compare equal (for lint).
	canonical string
	// constant is +1 or -1 when the condition folds to true or false
	// whatever the proposal, 0 otherwise (for lint).
	constant int8
	// ast is the checked expression (for lint).
	ast *cel.Ast
	// reads are the argument names it reads, compares the arguments it
	// compares with constants or typed expressions, and their types, pairs
	// the arguments it compares with each other (argreads.go).
	reads    argReads
	compares []argCompare
	pairs    []argPair
}

// celProblem is one compile problem of a condition, at a position inside
// the expression (1-based line and column).
type celProblem struct {
	line, column int
	msg          string
}

// compileCondition parses, type-checks and plans src. The result must be a
// bool (or dyn, checked at evaluation).
func compileCondition(lazy *celEnv, src string) (*condition, []celProblem) {
	if strings.TrimSpace(src) == "" {
		return nil, []celProblem{{msg: "when is empty; leave it out to match unconditionally"}}
	}
	if len(src) > maxWhenBytes {
		return nil, []celProblem{{msg: fmt.Sprintf("when is longer than %d bytes", maxWhenBytes)}}
	}
	env, err := lazy.get()
	if err != nil {
		return nil, []celProblem{{msg: err.Error()}}
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var out []celProblem
		for _, e := range iss.Errors() {
			out = append(out, celProblem{line: e.Location.Line(), column: e.Location.Column() + 1, msg: e.Message})
		}
		if len(out) == 0 {
			out = append(out, celProblem{msg: iss.Err().Error()})
		}
		return nil, out
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, []celProblem{{line: 1, column: 1, msg: fmt.Sprintf("%s, not %s", celBoolResultMsg, t)}}
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if iterates(ast) {
		opts = append(opts, cel.CostLimit(maxWhenCost))
	}
	prog, err := env.Program(ast, opts...)
	if err != nil {
		return nil, []celProblem{{msg: err.Error()}}
	}
	c := &condition{src: src, prog: prog, ast: ast, reads: readArgs(ast.NativeRep())}
	c.compares, c.pairs = comparedArgs(ast.NativeRep())
	if text, err := cel.AstToString(ast); err == nil {
		c.canonical = text
	} else {
		c.canonical = strings.Join(strings.Fields(src), " ")
	}
	c.constant = constantOf(env, ast)
	return c, nil
}

// iterates reports whether ast holds a comprehension (a macro such as all,
// exists or map).
func iterates(ast *cel.Ast) bool {
	return len(celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()), celast.KindMatcher(celast.ComprehensionKind))) > 0
}

// constantOf folds ast and reports whether it is the constant true (+1) or
// false (-1).
func constantOf(env *cel.Env, ast *cel.Ast) int8 {
	folder, err := cel.NewConstantFoldingOptimizer()
	if err != nil {
		return 0
	}
	opt, err := cel.NewStaticOptimizer(folder)
	if err != nil {
		return 0
	}
	folded, iss := opt.Optimize(env, ast)
	if iss != nil && iss.Err() != nil {
		return 0
	}
	e := folded.NativeRep().Expr()
	if e.Kind() != celast.LiteralKind {
		return 0
	}
	switch e.AsLiteral() {
	case types.True:
		return 1
	case types.False:
		return -1
	}
	return 0
}

// eval runs the condition against a proposal.
func (c *condition) eval(act *activation) (bool, error) {
	out, _, err := c.prog.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%w, got %s", errNotBool, out.Type().TypeName())
	}
	return bool(b), nil
}

// activation resolves the condition variables for one proposal. It is
// built once per evaluation, holds pointers only, and converts a value when
// a condition reads it, so rules that read little cost little.
type activation struct {
	in     *Input
	prices map[string]price
	now    time.Time

	// Values several rules tend to read, converted on first use.
	tool, args, labels, effect ref.Val
}

var _ interpreter.Activation = (*activation)(nil)

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	in := a.in
	run := in.Run
	switch name {
	case varTool:
		if a.tool == nil {
			a.tool = types.String(in.Tool.GetName())
		}
		return a.tool, true
	case varArgs:
		if a.args == nil {
			m := in.Args
			if m == nil {
				m = map[string]any{}
			}
			a.args = types.NewStringInterfaceMap(types.DefaultTypeAdapter, m)
		}
		return a.args, true
	case varGoal:
		return types.String(in.Proposal.GetGoal()), true
	case varConfidence:
		if p := in.Proposal; p != nil && p.Confidence != nil {
			return types.OptionalOf(types.Double(p.GetConfidence())), true
		}
		return types.OptionalNone, true
	case varEffect:
		if a.effect == nil {
			a.effect = types.String(effectName(classOf(in.Tool.GetEffect())))
		}
		return a.effect, true
	case varIdempotent:
		return types.Bool(in.Tool.GetIdempotent()), true
	case varNow:
		return types.Timestamp{Time: a.now}, true
	case varRunID:
		return types.String(run.GetRunId()), true
	case varRunPrincipal:
		return types.String(run.GetPrincipal()), true
	case varRunRoles:
		return types.NewStringList(types.DefaultTypeAdapter, run.GetPrincipalRoles()), true
	case varRunLabels:
		if a.labels == nil {
			labels := run.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			a.labels = types.NewStringStringMap(types.DefaultTypeAdapter, labels)
		}
		return a.labels, true
	case varRunStep:
		return types.Int(in.Step), true
	case varRunStepsUsed:
		return types.Int(run.GetStepsUsed()), true
	case varRunErrors:
		return types.Int(run.GetConsecutiveErrors()), true
	case varRunInTokens:
		return types.Int(run.GetInputTokens()), true
	case varRunOutTokens:
		return types.Int(run.GetOutputTokens()), true
	case varRunTokens:
		return types.Int(run.GetInputTokens() + run.GetOutputTokens()), true
	case varRunCost:
		cost, _ := runCost(run, a.prices)
		return types.Double(cost), true
	case varRunModel:
		return types.String(run.GetModel()), true
	case varRunElapsed:
		return types.Duration{Duration: run.GetElapsed().AsDuration()}, true
	case varCrewName:
		return types.String(in.Crew.GetCrew()), true
	case varCrewAgent:
		return types.String(in.Crew.GetAgent()), true
	case varCrewAgentType:
		return types.String(in.Crew.GetAgentType()), true
	case varCrewHandedBy:
		// The agent whose handoff gave the proposing one control.
		if p := in.Crew.GetHandoffPath(); len(p) > 1 {
			return types.String(p[len(p)-2]), true
		}
		return types.String(""), true
	case varCrewPath:
		return types.NewStringList(types.DefaultTypeAdapter, in.Crew.GetHandoffPath()), true
	}
	return nil, false
}

// effectName is the policy name of an effect class.
func effectName(e xctv1.Effect) string {
	switch e {
	case xctv1.Effect_EFFECT_READ:
		return effectNameRead
	case xctv1.Effect_EFFECT_REVERSIBLE:
		return effectNameRev
	}
	return effectNameIrrev
}
