package server

import (
	"flag"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/placement"
)

// Drain policies: what becomes of a sandbox a node drain moved off its
// worker (suspended to object storage by that worker).
const (
	DrainPolicyWake    = "wake"    // woken at once on another worker (default)
	DrainPolicySuspend = "suspend" // stays suspended until someone wakes it
)

// DrainConfig is how `spaced control` treats node drains of workers. Zero
// values take the flags' defaults (a ControlConfig built in code).
type DrainConfig struct {
	// Policy is DrainPolicyWake or DrainPolicySuspend ("": wake).
	Policy string
	// GraceSeconds is the sandbox Pods' termination grace period: what an
	// eviction gives their worker to suspend them (0:
	// k8s.DefaultDrainGraceSeconds).
	GraceSeconds int64
	// Timeout bounds the control plane's wait for one drained sandbox's
	// suspend (0: the placement default, 15 minutes).
	Timeout time.Duration
}

// registerDrainFlags adds the drain flags of `spaced control` to fs.
func registerDrainFlags(fs *flag.FlagSet, c *DrainConfig) {
	fs.StringVar(&c.Policy, "drain-policy", DrainPolicyWake,
		"what a sandbox drained off its node becomes: wake (woken at once on another worker, when it was running) or suspend (stays suspended)")
	fs.Int64Var(&c.GraceSeconds, "drain-grace-seconds", k8s.DefaultDrainGraceSeconds,
		"termination grace period of sandbox Pods: what an eviction (kubectl drain) gives the worker to suspend the sandbox to object storage")
	fs.DurationVar(&c.Timeout, "drain-timeout", 15*time.Minute, "bound on the wait for one drained sandbox's suspend; then it takes its worker's state")
}

func (c DrainConfig) validate() error {
	switch {
	case c.Policy != "" && c.Policy != DrainPolicyWake && c.Policy != DrainPolicySuspend:
		return fmt.Errorf("--drain-policy must be %s or %s, not %q", DrainPolicyWake, DrainPolicySuspend, c.Policy)
	case c.GraceSeconds < 0:
		return fmt.Errorf("--drain-grace-seconds must not be negative")
	case c.Timeout < 0:
		return fmt.Errorf("--drain-timeout must not be negative")
	}
	return nil
}

// withDrain sets placement's drain settings.
func (c DrainConfig) withDrain(pc placement.Config) placement.Config {
	pc.DrainStaysSuspended = c.Policy == DrainPolicySuspend
	pc.DrainGraceSeconds = c.GraceSeconds
	pc.DrainTimeout = c.Timeout
	return pc
}
