package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The image built here and the Dockerfile's must be the same image for a user: the
// same binaries at the root, the same non-root user, the same entrypoint. The
// Dockerfile is read as text, since no container engine runs here to build it.
func TestDockerfile_DescribesTheImageThisToolBuilds(t *testing.T) {
	data, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	final := df[strings.LastIndex(df, "\nFROM "):]
	if !strings.Contains(final, "USER "+NonRootUser+"\n") {
		t.Errorf("the Dockerfile's final stage does not run as %s, which the built image does", NonRootUser)
	}
	if !strings.Contains(final, `ENTRYPOINT ["`+Entrypoint+`"]`) {
		t.Errorf("the Dockerfile's entrypoint is not %s", Entrypoint)
	}
	loop := regexp.MustCompile(`for b in ([a-z ]+); do`).FindStringSubmatch(df)
	if loop == nil {
		t.Fatal("cannot find the Dockerfile's build loop")
	}
	var built []string
	for _, b := range strings.Fields(loop[1]) {
		built = append(built, "trustsync-"+b)
	}
	if strings.Join(built, " ") != strings.Join(Binaries, " ") {
		t.Errorf("the Dockerfile builds %v, this tool packs %v", built, Binaries)
	}
	if !strings.Contains(final, "COPY --from=build /out/ /") {
		t.Error("the Dockerfile no longer copies the binaries to the image's root")
	}
}

func TestTarOf_FixedTimesAndOwnersGiveTheSameBytes(t *testing.T) {
	files := func() []entry {
		return []entry{{name: "b", mode: 0o755, data: []byte("x")}, {name: "a", dir: true, mode: 0o755}, {name: "c", link: "b"}}
	}
	one, err := tarOf(files())
	if err != nil {
		t.Fatal(err)
	}
	two, err := tarOf(files())
	if err != nil {
		t.Fatal(err)
	}
	if string(one) != string(two) {
		t.Fatal("the same files gave different layers")
	}
}
