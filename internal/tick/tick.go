// Package tick runs the background loops of the stores: a function every
// interval until a stop channel closes.
package tick

import "time"

// Every calls f every d until stop is closed, then closes done. It is a
// store's sweeper goroutine: go tick.Every(s.stop, s.done, d, s.sweep).
func Every(stop <-chan struct{}, done chan<- struct{}, d time.Duration, f func()) {
	defer close(done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}
