package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trustsync/trustsync/injector"
)

var numbers = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}

// A count the docs write in words ("seven parts", "three deliveries", "the two
// commands") is what it counts: the list, block or table that follows it, or the code.
// Every such count of a noun below is checked, so a new one cannot go unchecked.
func TestDocs_CountsWrittenInProseAreTrue(t *testing.T) {
	counters := map[string]func(after string) int{
		// The parts: the top-level items of the list that follows.
		"parts": func(after string) int { return listItems(after) },
		// The pod deliveries: the values trustsync.io/delivery takes.
		"deliveries": func(string) int { return len(injector.Deliveries) },
		// Commands: the next ```sh block's commands.
		"commands": func(after string) int { return shCommands(after) },
		// Kinds of something: the rows of the next table.
		"kinds": func(after string) int { return tableRows(after) },
	}
	// Where a count is a measurement's context, not a claim about the tree.
	skip := map[string]bool{"benchmarks.md": true}
	phrase := regexp.MustCompile(`(?i)\b(` + strings.Join(keys(numbers), "|") + `) (parts|deliveries|commands|kinds)\b`)
	files, _ := filepath.Glob("../../docs/*.md")
	checked := 0
	for _, f := range append(files, "../../README.md") {
		if skip[filepath.Base(f)] {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, m := range phrase.FindAllStringSubmatchIndex(text, -1) {
			said := numbers[strings.ToLower(text[m[2]:m[3]])]
			noun := strings.ToLower(text[m[4]:m[5]])
			// Commands counted before the phrase ("runs exactly these two commands")
			// are the block just above it.
			after := text[m[1]:]
			if strings.Contains(strings.ToLower(text[max(0, m[0]-12):m[0]]), "these") {
				after = text[strings.LastIndex(text[:m[0]], "```sh"):]
			}
			checked++
			if got := counters[noun](after); got != said {
				line := strings.Count(text[:m[0]], "\n") + 1
				t.Errorf("%s:%d says %q, but counts %d", filepath.Base(f), line, text[m[0]:m[1]], got)
			}
		}
	}
	t.Logf("checked %d counts", checked)
	if checked < 5 {
		t.Fatalf("checked only %d counts; the search is broken", checked)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// listItems counts the top-level items ("- " at the start of a line) of the first
// list in text, continuation lines indented.
func listItems(text string) int {
	n, started := 0, false
	for _, line := range strings.Split(text, "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "- "):
			n, started = n+1, true
		case started && (strings.HasPrefix(line, "  ") || line == ""):
		case started:
			return n
		}
	}
	return n
}

// shCommands counts the commands of the first ```sh block in text: lines that are
// neither comments, blank, nor continuations of the line before.
func shCommands(text string) int {
	start := strings.Index(text, "```sh\n")
	if start < 0 {
		return 0
	}
	block := text[start+len("```sh\n"):]
	block = block[:strings.Index(block, "```")]
	n, continued := 0, false
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		if !continued && trimmed != "" && !strings.HasPrefix(trimmed, "#") {
			n++
		}
		code, _, _ := strings.Cut(trimmed, " #")
		continued = strings.HasSuffix(strings.TrimSpace(code), `\`)
	}
	return n
}

// tableRows counts the body rows of the first Markdown table in text.
func tableRows(text string) int {
	n, inTable := 0, false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			if inTable {
				n++
			}
			inTable = true
		case inTable:
			return n - 1 // the header's separator row
		}
	}
	return n - 1
}
