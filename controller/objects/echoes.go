package objects

import "sync"

// Echoes are the resourceVersions a controller's own writes returned, by object, so
// that the watch event each write causes does not reconcile again the change it came
// from: without them a TrustTarget filling a new namespace was reconciled three times
// for it (the namespace, its own ConfigMap's event, its own status's event).
//
// Only the last write of each object is held, and an echo is forgotten once seen: the
// set holds at most one entry per object written. A write whose event never comes (the
// object deleted first) leaves an entry until the object is written again.
type Echoes struct {
	mu sync.Mutex
	rv map[string]string
}

// Wrote records that the write of key returned resourceVersion rv.
func (e *Echoes) Wrote(key, rv string) {
	if rv == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rv == nil {
		e.rv = map[string]string{}
	}
	e.rv[key] = rv
}

// Echo says whether key at resourceVersion rv is what this controller wrote last, and
// forgets it: the event is the write's own, and nothing changed since.
func (e *Echoes) Echo(key, rv string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if rv == "" || e.rv[key] != rv {
		return false
	}
	delete(e.rv, key)
	return true
}
