package render

import (
	"crypto/sha256"
	"runtime"
	"sync"
	"weak"

	tsbundle "github.com/trustsync/trustsync/bundle"
)

// sharedPEM is one set of anchors' PEM encoding, shared by every path that holds that
// set, in any rendering of this process: a controller filling many objects (or one
// object with many keys) from the same sources holds one copy, not one per key. The
// public roots are some 200 KB; 32 keys of them in 45 ConfigMaps were 400 MB.
type sharedPEM struct{ data []byte }

// sharedPEMs maps a set (tsbundle.Pool.SetSum) to its encoding while any path holds
// it; the entry goes when the last one is collected. A pool's PEM is a function of
// its set (sorted, deduplicated), so the set names the bytes.
var sharedPEMs sync.Map // [sha256.Size]byte -> weak.Pointer[sharedPEM]

// sharedPEMOf is the encoding of pool, whose set is set: the one already held by
// some path if any, else encoded now and shared from then on.
func sharedPEMOf(set [sha256.Size]byte, pool *tsbundle.Pool) *sharedPEM {
	if v, ok := sharedPEMs.Load(set); ok {
		if s := v.(weak.Pointer[sharedPEM]).Value(); s != nil {
			return s
		}
	}
	s := &sharedPEM{data: pool.PEM()}
	w := weak.Make(s)
	if v, loaded := sharedPEMs.LoadOrStore(set, w); loaded {
		if other := v.(weak.Pointer[sharedPEM]).Value(); other != nil {
			return other // encoded at the same moment by another renderer
		}
		sharedPEMs.Store(set, w)
	}
	runtime.AddCleanup(s, func(k sharedKey) { sharedPEMs.CompareAndDelete(k.set, k.w) }, sharedKey{set, w})
	return s
}

type sharedKey struct {
	set [sha256.Size]byte
	w   weak.Pointer[sharedPEM]
}
