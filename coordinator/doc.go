// Package coordinator turns a dataset into work: it validates instances,
// extracts their gold locations and plans rollout jobs. This file set holds
// the gold run used by `a2farm gold`; the JetStream publisher builds on it.
package coordinator
