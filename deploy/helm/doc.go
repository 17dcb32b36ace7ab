// Package helm holds the tests of SPACE's Helm chart (deploy/helm/space):
// it renders the chart with the Helm SDK for default and other values,
// lints it, decodes every object it renders as a known Kubernetes kind and
// checks what each object promises (probes, privileges, capacity, RBAC).
// The chart itself is YAML; this package has no code that ships.
package helm
