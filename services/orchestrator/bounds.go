package orchestrator

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
)

// Bounds on what a caller may ask of a run (docs/security.md, Bounds).
const (
	// DefaultMaxStepsLimit is the largest max_steps a run may ask for when
	// the configuration does not say.
	DefaultMaxStepsLimit = 1000
	// MaxGoalBytes bounds a run's goal.
	MaxGoalBytes = 64 << 10
	// MaxLabels and MaxLabelBytes bound a run's labels.
	MaxLabels     = 64
	MaxLabelBytes = 1024
	// MaxModelBytes bounds the model reference a run names (and a crew
	// file's name), recorded on run_started.
	MaxModelBytes = 1024
	// MaxReasonBytes bounds a cancel's reason, recorded on the run's end
	// (and every reader's GetRun and ListRuns): a decision's bound.
	MaxReasonBytes = 4096
)

// parseRoleLimits parses ROLE=N[,ROLE=N...] into MaxStepsLimitByRole.
func (c *Config) parseRoleLimits(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		role, n, ok := strings.Cut(item, "=")
		limit, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || err != nil || limit < 1 {
			return fmt.Errorf("want ROLE=N with N at least 1, got %q", item)
		}
		role = strings.TrimSpace(role)
		if !auth.IsKnownRole(role) {
			return fmt.Errorf("unknown role %q (known: %s)", role, strings.Join(auth.KnownRoles, ", "))
		}
		if c.MaxStepsLimitByRole == nil {
			c.MaxStepsLimitByRole = map[string]int{}
		}
		c.MaxStepsLimitByRole[role] = limit
	}
	return nil
}

// checkStepLimits fills the default limit and checks the limits against
// the default budget.
func (c *Config) checkStepLimits() []error {
	var errs []error
	if c.MaxStepsLimit < 0 {
		errs = append(errs, fmt.Errorf("-max-steps-limit must not be negative"))
	}
	if c.MaxStepsLimit == 0 {
		c.MaxStepsLimit = DefaultMaxStepsLimit
	}
	if c.MaxSteps > c.MaxStepsLimit {
		errs = append(errs, fmt.Errorf("-max-steps %d is above -max-steps-limit %d", c.MaxSteps, c.MaxStepsLimit))
	}
	for role, n := range c.MaxStepsLimitByRole {
		if n < 1 || !auth.IsKnownRole(role) {
			errs = append(errs, fmt.Errorf("-max-steps-limit-role %s=%d: want a known role and a limit of at least 1", role, n))
		}
	}
	return errs
}

// stepLimit is the largest max_steps principals with roles may ask for:
// the largest of their roles' limits, or the server's limit when none of
// their roles has one.
func (s *Service) stepLimit(roles []string) (limit int, by string) {
	for _, r := range roles {
		if n, ok := s.cfg.MaxStepsLimitByRole[r]; ok && n > limit {
			limit, by = n, "role "+r
		}
	}
	if limit == 0 {
		limit, by = s.cfg.MaxStepsLimit, "the server"
	}
	if limit == 0 {
		limit = DefaultMaxStepsLimit
	}
	return limit, by
}

// stepBudget is the run's step budget: max_steps, or the default, within
// the caller's limit. It also bounds the goal and labels, which go on the
// chain as they are.
func (s *Service) stepBudget(req *xctv1.StartRunRequest, roles []string) (int, error) {
	if len(req.GetGoal()) > MaxGoalBytes || !utf8.ValidString(req.GetGoal()) {
		return 0, status.Errorf(codes.InvalidArgument, "goal must be valid UTF-8 of at most %d bytes (it has %d)", MaxGoalBytes, len(req.GetGoal()))
	}
	if len(req.GetModel()) > MaxModelBytes || len(req.GetCrewFile()) > MaxModelBytes {
		return 0, status.Errorf(codes.InvalidArgument, "the model reference and the crew file's name must be at most %d bytes (they have %d and %d)",
			MaxModelBytes, len(req.GetModel()), len(req.GetCrewFile()))
	}
	if len(req.GetLabels()) > MaxLabels {
		return 0, status.Errorf(codes.InvalidArgument, "at most %d labels, got %d", MaxLabels, len(req.GetLabels()))
	}
	for k, v := range req.GetLabels() {
		if len(k)+len(v) > MaxLabelBytes {
			return 0, status.Errorf(codes.InvalidArgument, "label %.40q is longer than %d bytes", k, MaxLabelBytes)
		}
	}
	limit, by := s.stepLimit(roles)
	n := int(req.GetMaxSteps())
	if n > limit {
		return 0, status.Errorf(codes.InvalidArgument, "max_steps %d is above the limit of %d set by %s; ask for at most %d", n, limit, by, limit)
	}
	if n == 0 {
		n = min(s.cfg.MaxSteps, limit)
	}
	return n, nil
}

// checkReason refuses a cancel's reason that is not valid UTF-8 of at most
// MaxReasonBytes.
func checkReason(reason string) error {
	if len(reason) > MaxReasonBytes || !utf8.ValidString(reason) {
		return status.Errorf(codes.InvalidArgument, "the reason must be valid UTF-8 of at most %d bytes (it has %d)", MaxReasonBytes, len(reason))
	}
	return nil
}
