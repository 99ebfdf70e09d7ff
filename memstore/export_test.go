package memstore

// SetStepHook makes f run before every algorithm step, under the shard's
// lock, until the returned function restores the default (no hook).
func SetStepHook(f func()) (restore func()) {
	stepHook = f
	return func() { stepHook = nil }
}
