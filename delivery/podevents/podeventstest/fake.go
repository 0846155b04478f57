// Package podeventstest records what would become Events on the pod, for tests.
package podeventstest

import "sync"

// Recorder keeps every Event it is given, as "Type Reason: message", and the keys of
// those recorded once; it is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	got  []string
	keys []string
}

func (r *Recorder) Warning(reason, message string) { r.add("Warning "+reason+": "+message, "") }
func (r *Recorder) Normal(reason, message string)  { r.add("Normal "+reason+": "+message, "") }

func (r *Recorder) WarningOnce(key, reason, message string) {
	r.add("Warning "+reason+": "+message, key)
}

func (r *Recorder) add(event, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, event)
	if key != "" {
		r.keys = append(r.keys, key)
	}
}

// Events is every Event recorded so far, in order.
func (r *Recorder) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// Keys is the key of every Event recorded once, in order.
func (r *Recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}
