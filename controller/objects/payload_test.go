package objects

import (
	"strings"
	"testing"
)

// What an object cannot hold is refused before it is sent, saying how much it would
// have held and what to do.
func TestTooLarge_RefusesWhatNoObjectHolds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   map[string]string
		binary map[string][]byte
		says   string
	}{
		{name: "a bundle is written", data: map[string]string{"ca.crt": strings.Repeat("x", 200<<10)}},
		{name: "exactly the most an object holds is written", data: map[string]string{"k": strings.Repeat("x", MaxObjectBytes-1)}},
		{name: "one byte more is refused", data: map[string]string{"k": strings.Repeat("x", MaxObjectBytes)}, says: "the 1 keys would hold 1048577 bytes"},
		{name: "32 keys of the public roots are refused", data: func() map[string]string {
			d := map[string]string{}
			roots := strings.Repeat("x", 200<<10)
			for i := range 32 {
				d[string(rune('a'+i))] = roots
			}
			return d
		}(), says: "name fewer sources"},
		{name: "truststores count too", data: map[string]string{"ca.crt": strings.Repeat("x", 600<<10)}, binary: map[string][]byte{"t.p12": make([]byte, 600<<10)}, says: "the 2 keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := TooLarge(tc.data, tc.binary)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("%v, want it refused saying %q", err, tc.says)
			}
		})
	}
}
