// Package docs holds the tests that hold docs/ to the code where a reader could not
// tell they disagree: every Event reason a component records is documented, and every
// test the docs cite as proof exists under that name, and each build target builds
// only what the docs say it does.
package docs
