package validator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// PolicySet is the validator's policy as configured: one or more policy
// files, in order. The files in enforce mode (the default) act as one
// policy: their rules are evaluated together (deny wins across files), and
// of the settings they give the strictest applies (the smallest budgets
// and approval TTL, the highest confidence thresholds, every rate limit; a
// setting no file gives keeps its default).
// Files in shadow mode are each evaluated on their own and recorded as
// would-have-been verdicts, never enforced. When every file is in shadow
// mode, the built-in default policy is enforced.
//
// Its version is the file's own version when there is one file; otherwise
// "sha256:" and the SHA-256 over the files' SHA-256 digests in order (the
// built-in default first when it is enforced for want of an enforce file),
// so any change to any file, or to their order, is a new version.
//
// A PolicySet is immutable and safe for concurrent use.
type PolicySet struct {
	version         string
	files           []*RulesPolicy
	enforced        *ruleSet
	shadows         []*RulesPolicy
	defaultEnforced bool
}

var _ Policy = (*PolicySet)(nil)

// LoadPolicyFiles reads, compiles and combines the policy files at paths,
// in order. No path means the built-in default policy. Every problem of
// every file is reported, each as a *PolicyError naming its file and line;
// a file that cannot be read is an error wrapping the fs error.
func LoadPolicyFiles(paths ...string) (*PolicySet, error) {
	if len(paths) == 0 {
		return NewPolicySet(DefaultPolicy())
	}
	env := &celEnv{}
	var (
		files []*RulesPolicy
		errs  []error
	)
	for _, path := range paths {
		p, err := loadRulesFile(env, path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewPolicySet(files...)
}

// NewPolicySet combines policy files, in order. Rule ids must be unique
// across the enforced files, and their price tables must agree.
func NewPolicySet(files ...*RulesPolicy) (*PolicySet, error) {
	if len(files) == 0 || slices.Contains(files, nil) {
		return nil, ErrNoPolicy
	}
	s := &PolicySet{files: slices.Clone(files)}
	var enforce []*RulesPolicy
	for _, f := range files {
		if f.Shadow() {
			s.shadows = append(s.shadows, f)
		} else {
			enforce = append(enforce, f)
		}
	}
	if len(enforce) == 0 {
		enforce = []*RulesPolicy{DefaultPolicy()}
		s.defaultEnforced = true
	}
	if len(enforce) == 1 {
		s.enforced = enforce[0].rs
	} else {
		merged, err := mergeRuleSets(enforce)
		if err != nil {
			return nil, err
		}
		s.enforced = merged
	}
	if len(files) == 1 && !s.defaultEnforced {
		s.version = files[0].version
	} else {
		h := sha256.New()
		hashed := files
		if s.defaultEnforced {
			hashed = append([]*RulesPolicy{enforce[0]}, files...)
		}
		for _, f := range hashed {
			digest, err := hex.DecodeString(strings.TrimPrefix(f.version, policyVersionPrefix))
			if err != nil {
				return nil, fmt.Errorf("policy %s: version %q: %w", f.file, f.version, err)
			}
			h.Write(digest)
		}
		s.version = policyVersionPrefix + hex.EncodeToString(h.Sum(nil))
	}
	return s, nil
}

// mergeRuleSets makes one rule set of several enforced files.
func mergeRuleSets(files []*RulesPolicy) (*ruleSet, error) {
	first := files[0].rs
	merged := &ruleSet{settings: first.settings}
	merged.settings.prices = maps.Clone(first.settings.prices)
	merged.settings.rateLimits = slices.Clone(first.settings.rateLimits)
	var problems []error
	seen := map[string]*rule{}
	for fi, f := range files {
		for i := range f.rs.rules {
			r := &f.rs.rules[i]
			if prev, dup := seen[r.id]; dup {
				problems = append(problems, &PolicyError{File: r.file, Line: r.line,
					Msg: fmt.Sprintf("rule %q: duplicate id, first used at %s:%d", r.id, prev.file, prev.line)})
				continue
			}
			seen[r.id] = r
			merged.rules = append(merged.rules, *r)
		}
		if fi == 0 {
			continue
		}
		for _, model := range merged.settings.merge(&f.rs.settings) {
			problems = append(problems, &PolicyError{File: f.file, Line: f.rs.settings.priceLines[model],
				Msg: fmt.Sprintf("prices.%s disagrees with the price an earlier policy file gives", model)})
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return merged, nil
}

// Version identifies the set's content; see PolicySet.
func (s *PolicySet) Version() string { return s.version }

// Evaluate judges one proposal by the enforced files (see
// RulesPolicy.Evaluate for the order of the checks). Shadow files are
// evaluated by the Service, which records their verdicts.
func (s *PolicySet) Evaluate(_ context.Context, in *Input) (Outcome, error) {
	return s.enforced.evaluate(in)
}

// Files lists the set's files in order, shadow ones included.
func (s *PolicySet) Files() []*RulesPolicy { return slices.Clone(s.files) }

// Shadows lists the files in shadow mode, in order.
func (s *PolicySet) Shadows() []*RulesPolicy { return slices.Clone(s.shadows) }

// DefaultEnforced reports whether the built-in default policy is enforced
// because every file is in shadow mode.
func (s *PolicySet) DefaultEnforced() bool { return s.defaultEnforced }

// ApprovalTTL is how long an approval the enforced policy asks for stays
// valid.
func (s *PolicySet) ApprovalTTL() time.Duration { return s.enforced.settings.approvalTTL }
