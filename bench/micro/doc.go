// Package micro holds micro-benchmarks that span packages: the collector's
// per-record path (Add) and the symbolization of a report (Build), fed
// with stacks of this very process so that no root is needed.
package micro
