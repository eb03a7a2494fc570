package main

import (
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/learner"
)

// learnFlags are the learner's hyperparameters — rewards, history
// grouping, advantages and the trainer filter — bound the same way on
// every command that labels trajectories (learner, replay, up).
type learnFlags struct{ cfg learner.Config }

func (l *learnFlags) bind(cmd *cobra.Command, e *env) {
	l.cfg = learner.DefaultConfig()
	l.cfg.Rewards.Languages = e.languages
	c := &l.cfg
	f := cmd.Flags()
	f.IntVar(&c.Advantage.H, "H", c.Advantage.H, "history length (depths 1..H+1)")
	f.StringVar(&c.Advantage.Scheme, "scheme", c.Advantage.Scheme, "history keys: state or state_action")
	f.StringVar(&c.Advantage.Norm, "mode", c.Advantage.Norm, "group normalisation: mean_norm or mean_std_norm")
	f.Float64Var(&c.Advantage.DepthAlpha, "depth-alpha", c.Advantage.DepthAlpha, "depth weight exponent: (k+1)^alpha")
	f.Float64Var(&c.Advantage.Beta, "beta", c.Advantage.Beta, "weight = exp(beta * clip(A, -kappa, kappa))")
	f.Float64Var(&c.Advantage.Kappa, "kappa", c.Advantage.Kappa, "advantage clip")
	f.Float64Var(&c.Rewards.Gamma, "gamma", c.Rewards.Gamma, "discount")
	f.Float64Var(&c.Rewards.StepCost, "step-cost", c.Rewards.StepCost, "cost per step")
	f.Float64Var(&c.Rewards.AlphaFile, "alpha-file", c.Rewards.AlphaFile, "file-level weight")
	f.Float64Var(&c.Rewards.AlphaModule, "alpha-module", c.Rewards.AlphaModule, "module-level weight")
	f.Float64Var(&c.Rewards.AlphaEntity, "alpha-entity", c.Rewards.AlphaEntity, "entity-level weight")
	f.Float64Var(&c.Rewards.Commitment, "commitment", c.Rewards.Commitment, "discovery-commit weight (lambda)")
	f.Float64Var(&c.Rewards.F1Scale, "f1-scale", c.Rewards.F1Scale, "terminal F1 scale")
	f.StringVar(&c.Rewards.Discovery, "discovery", c.Rewards.Discovery, "surfaced (what tools returned) or reference (mentions anywhere)")
	f.BoolVar(&c.Rewards.TerminalOnly, "terminal-only", false, "reward only the last step (F1 term)")
	f.BoolVar(&c.KeepUnsuccessful, "keep-unsuccessful", false, "turn off the trainer filter (trajectories that never surfaced a gold file)")
}

// config returns the hyperparameters once they are valid; a bad one is a
// usage error (exit 2), reported before any work.
func (l *learnFlags) config() (learner.Config, error) {
	if err := l.cfg.Rewards.Validate(); err != nil {
		return l.cfg, &usageError{err}
	}
	if err := l.cfg.Advantage.Validate(); err != nil {
		return l.cfg, &usageError{err}
	}
	return l.cfg, nil
}
