package signer

import (
	"strconv"
	"testing"
	"time"

	"github.com/trustsync/trustsync/test/controlplane"
)

// BenchmarkSigning_ByKeeper is BenchmarkSigning's trustsync-signer at its defaults,
// with its CA key in the Secret, in a SoftHSM2 token (trustsync-signer-pkcs11) and in
// a local KMS: 1,000 CSRs, approved by the benchmark, timed until the last certificate
// is written, against the same kube-apiserver in one run. Where the key lives should
// not show: the API server's status writes bound the signer.
func BenchmarkSigning_ByKeeper(b *testing.B) {
	const n = 1000
	cp := planes.Get(b, true)
	secret := keeper{kind: "secret", keyRef: func(string) string { return "" }, start: (*controlplane.ControlPlane).StartSigner}
	kinds := []struct {
		kind string
		make func(testing.TB) keeper
	}{{"secret", func(testing.TB) keeper { return secret }}}
	kinds = append(kinds, keepers...)
	for _, k := range kinds {
		b.Run(k.kind, func(b *testing.B) {
			ks := startKeeperSigner(b, cp, k.make(b), "bench-"+k.kind, "example.com/bench-"+k.kind, false, "-v=0")
			waitForBundle(b, cp, "example.com:bench-"+k.kind+":live")
			for i := 0; b.Loop(); i++ {
				took := issueAll(b, cp, ks.name, "keeper-"+k.kind+"-"+strconv.Itoa(i), n)
				b.ReportMetric(float64(n)/took.Seconds(), "issued/s")
			}
			ks.process.Stop(10 * time.Second)
		})
	}
}
