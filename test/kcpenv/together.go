package kcpenv

import (
	"sync"
	"time"
)

// Together runs first and second at the same moment, each after its own
// delay, and returns once both have returned: the two requests of one round
// of a race between a dependent's write and its target's DELETE.
func Together(firstDelay time.Duration, first func(), secondDelay time.Duration, second func()) {
	gate := make(chan struct{})
	var both sync.WaitGroup
	for _, run := range []struct {
		delay time.Duration
		do    func()
	}{{firstDelay, first}, {secondDelay, second}} {
		both.Go(func() {
			<-gate
			time.Sleep(run.delay)
			run.do()
		})
	}
	close(gate)
	both.Wait()
}
