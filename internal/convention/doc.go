// Package convention holds no code: its tests pin the rules the tree keeps
// by convention, in the manner of Tailscale's dependency checker, so that a
// change that breaks one fails `make test` instead of waiting for a review:
// which packages may import which, how long a file may grow, that every
// package says what it is for, and that no build output is committed.
package convention
