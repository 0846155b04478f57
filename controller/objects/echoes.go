package objects

import "sync"

// Echoes are the resourceVersions a controller's own writes returned, by object, so
// that the watch event each write causes does not reconcile again the change it came
// from: without them a TrustTarget filling a new namespace was reconciled three times
// for it (the namespace, its own ConfigMap's event, its own status's event).
//
// A write's event may arrive before its response: an event for an object whose write
// is in flight is held until the response tells whether it was the write's own.
//
// Only the last write of each object is held, and an echo is forgotten once seen: the
// set holds at most one entry per object written. A write whose event never comes (the
// object deleted first) leaves an entry until the object is written again.
type Echoes struct {
	mu sync.Mutex
	at map[string]*echo
}

type echo struct {
	// rv is what the write returned; "" while it is in flight.
	rv string
	// seen are the versions of events that came while the write was in flight.
	seen []string
}

// Writing records that a write of key is about to be sent.
func (e *Echoes) Writing(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil {
		e.at = map[string]*echo{}
	}
	e.at[key] = &echo{}
}

// Wrote records that the write of key returned resourceVersion rv ("" when it
// failed). It says whether an event that came meanwhile was someone else's change,
// which the caller must look at again.
func (e *Echoes) Wrote(key, rv string) (changedMeanwhile bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.at[key]
	if w == nil {
		return false
	}
	ownSeen := false
	for _, seen := range w.seen {
		if seen == rv {
			ownSeen = true
		} else {
			changedMeanwhile = true
		}
	}
	if ownSeen || rv == "" {
		delete(e.at, key)
	} else {
		w.rv, w.seen = rv, nil
	}
	return changedMeanwhile
}

// Echo says whether an event of key at resourceVersion rv needs no reconcile: it is
// what this controller wrote last (forgotten from then on), or it came while a write
// of key is in flight (Wrote then decides).
func (e *Echoes) Echo(key, rv string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.at[key]
	switch {
	case w == nil || rv == "":
		return false
	case w.rv == "":
		w.seen = append(w.seen, rv)
		return true
	case w.rv == rv:
		delete(e.at, key)
		return true
	}
	return false
}
