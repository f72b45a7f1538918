package validator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"
)

// reloader is the goroutine that watches the policy files.
type reloader struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the watch and waits for it.
func (r *reloader) stop() {
	r.cancel()
	<-r.done
}

// reloadState is what the last look at the policy files found, so that a
// problem is logged when it appears or changes, not on every look.
type reloadState struct {
	// problem identifies the current problem ("" when the files are
	// good): the read error, or the digest of the content that does not
	// compile.
	problem string
	// err is that problem's error.
	err error
}

// startReload reads the policy files every interval and installs them when
// they changed and compile. A file that is missing, unreadable or broken
// leaves the last good policy in force; that is logged at Error level when
// it starts or changes, and again at Info level when it is fixed.
func (s *Service) startReload(files []string, every time.Duration) *reloader {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reloader{cancel: cancel, done: make(chan struct{})}
	files = slices.Clone(files)
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// Problems are logged where they are found, once each.
				_ = s.reloadOnce(files)
			}
		}
	}()
	return r
}

// ReloadPolicy reads the configured policy files now and installs them if
// they changed and compile; otherwise the policy in force stays. It
// returns the problem, if any. The reload loop calls it on every tick.
func (s *Service) ReloadPolicy() error {
	return s.reloadOnce(s.cfg.PolicyFiles())
}

func (s *Service) reloadOnce(files []string) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if len(files) == 0 {
		return nil
	}
	contents := make([][]byte, len(files))
	for i, f := range files {
		data, err := readPolicyFile(f)
		if err != nil {
			s.reloadFailed("read:"+err.Error(), "policy file unreadable; the last good policy stays in force", err)
			return err
		}
		contents[i] = data
	}
	inst := s.policy.Load()
	if inst.set != nil && sameFiles(inst.set, files, contents) {
		s.retryEpoch()
		s.reloadRecovered(inst.version, false)
		return nil
	}
	digest := contentDigest(contents)
	if s.lastReload.problem == "parse:"+digest {
		return s.lastReload.err
	}
	env := &celEnv{}
	var (
		parsed []*RulesPolicy
		errs   []error
	)
	for i, f := range files {
		p, err := parsePolicy(env, f, contents[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parsed = append(parsed, p)
	}
	var set *PolicySet
	if len(errs) == 0 {
		var err error
		if set, err = NewPolicySet(parsed...); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		s.reloadFailed("parse:"+digest, "policy change refused; the last good policy stays in force", err)
		return err
	}
	old := inst.version
	if err := s.SetPolicy(set); err != nil {
		return err
	}
	s.logPolicy("validator policy reloaded", set)
	s.log.Info("validator policy version changed", "from", old, "to", set.Version())
	s.reloadRecovered(set.Version(), true)
	return nil
}

// reloadFailed records a problem and logs it if it is new.
func (s *Service) reloadFailed(problem, msg string, err error) {
	if s.lastReload.problem == problem {
		return
	}
	s.lastReload = reloadState{problem: problem, err: err}
	s.log.Error(msg, "files", s.cfg.PolicyFile, "version_in_force", s.policy.Load().version, "err", err)
}

// reloadRecovered clears a recorded problem, logging that it is gone.
func (s *Service) reloadRecovered(version string, installed bool) {
	if s.lastReload.problem == "" {
		return
	}
	s.lastReload = reloadState{}
	if !installed {
		s.log.Info("policy files are good again; the policy in force is unchanged", "version", version)
	}
}

// sameFiles reports whether files with contents are exactly the set's.
func sameFiles(set *PolicySet, files []string, contents [][]byte) bool {
	if len(set.files) != len(files) {
		return false
	}
	for i, f := range set.files {
		sum := sha256.Sum256(contents[i])
		if f.file != files[i] || f.version != policyVersionPrefix+hex.EncodeToString(sum[:]) {
			return false
		}
	}
	return true
}

// contentDigest identifies the contents of several files.
func contentDigest(contents [][]byte) string {
	h := sha256.New()
	for _, c := range contents {
		sum := sha256.Sum256(c)
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}
