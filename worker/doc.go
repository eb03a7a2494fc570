// Package worker runs rollouts: it builds (or loads) a snapshot's indexes,
// plays episodes with a policy and records trajectories. Localize runs a
// dataset in one process; the JetStream worker builds on the same pieces.
package worker
