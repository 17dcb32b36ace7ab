//go:build !faultinject

// Package faultinject names the steps of lifecycle work at which a test may
// kill the server, to prove that every operation ends in a terminal, true
// state across a crash at any of them (e2e/faults_test.go).
//
// In a normal build Point does nothing and costs nothing: the hook exists
// only in binaries built with the faultinject build tag, which no
// production build uses. It must never carry behaviour of its own.
package faultinject

// Enabled reports whether this binary was built with fault injection.
const Enabled = false

// Point marks a named step (e.g. "suspend.saved"). Without the faultinject
// build tag it does nothing.
func Point(name string) {}
