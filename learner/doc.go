// Package learner turns trajectories into training data: rewards, returns,
// history-grouped advantages, weights and shards (sub-packages rewards,
// advantage, metrics and shard). It never imports the worker.
package learner
