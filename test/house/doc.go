// Package house holds the test of the project's layout: every package stands on the
// floor docs/design.md's Layout table gives it, imports nothing above it, and links
// only what its job needs. It is a package of its own so that no package under test
// hosts it.
package house
