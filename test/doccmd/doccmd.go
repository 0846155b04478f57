// Package doccmd reads the shell commands the docs teach, so that a test runs exactly
// what a user following them would type: a command the docs teach is the command a
// test runs.
package doccmd

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Block returns the commands of the first ```sh block after the first line of file
// holding marker: one per command, a line continued with a trailing backslash joined
// to the next, comments (a # at the start of a line or after a space) and blank lines
// left out. It fails when there is no such marker or block, so a test never passes by
// running nothing.
func Block(file, marker string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	text := string(data)
	at := strings.Index(text, marker)
	if at < 0 {
		return nil, fmt.Errorf("%s no longer says %q: the test reads the commands that follow it", file, marker)
	}
	// Fences may be indented (a block inside a list item).
	lines := strings.Split(text[at:], "\n")
	open := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "```sh" })
	if open < 0 {
		return nil, fmt.Errorf("%s: no ```sh block after %q", file, marker)
	}
	lines = lines[open+1:]
	end := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "```") })
	if end < 0 {
		return nil, fmt.Errorf("%s: the ```sh block after %q is not closed", file, marker)
	}
	var commands []string
	var current string
	for _, line := range lines[:end] {
		line = strings.TrimSpace(stripComment(line))
		if line == "" && current == "" {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			current += strings.TrimSpace(cont) + " "
			continue
		}
		commands = append(commands, strings.TrimSpace(current+line))
		current = ""
	}
	if current != "" {
		commands = append(commands, strings.TrimSpace(current))
	}
	if len(commands) == 0 {
		return nil, fmt.Errorf("%s: the ```sh block after %q holds no command", file, marker)
	}
	return commands, nil
}

// stripComment drops a shell comment: a # at the line's start or after whitespace,
// outside quotes.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}
