package injector

import (
	"os"
	"strings"
	"testing"
)

// The sidecar image a webhook injects when not told otherwise is the release's own:
// its tag follows VERSION, as the chart's default image does.
func TestDefaultImage_IsTheReleasesOwn(t *testing.T) {
	v, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ghcr.io/trustsync/trustsync:v" + strings.TrimSpace(string(v)); DefaultImage != want {
		t.Errorf("DefaultImage is %s, want %s: set it with VERSION", DefaultImage, want)
	}
}
