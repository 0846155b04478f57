package plugin

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// safe is s as a terminal may show it: names, paths and messages come from tenants
// (a pod's annotations, a report's paths) and reach an administrator's terminal, so
// every character that is not printable (escape sequences, newlines, tabs, which
// would also break a table's columns) is written as its Go escape.
func safe(s string) string { return escape(s, true) }

// oneLine is s with every non-printable character escaped, and backslashes as they
// are: for text already quoted (convert's notes, YAML), which must stay one line.
func oneLine(s string) string { return escape(s, false) }

func escape(s string, backslash bool) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || (backslash && r == '\\') }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case backslash && r == '\\':
			b.WriteString(`\\`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u200b'
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// row writes one table row of cells, each made safe.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, safe(c))
	}
	fmt.Fprintln(w)
}
