package controlplane

import "sync"

// InParallel runs do(0..n-1), width at a time: how a test makes many API objects
// without its own client being what it waits for.
func InParallel(n, width int, do func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, width)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			do(i)
		}()
	}
	wg.Wait()
}
