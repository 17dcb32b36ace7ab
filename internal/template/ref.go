package template

// Ref names a template build a sandbox boots from: a name, and the digest
// of one build when it is pinned ("" for the newest ready build). Parse it
// once where a reference enters (the API's request, a path value) and carry
// it; String gives the wire form back.
type Ref struct {
	Name   string
	Digest string // "sha256:<64 hex digits>", or "" for the newest ready build
}

// Parse reads "name" or "name@sha256:<hex>" as a Ref (invalid_argument
// when it is neither).
func Parse(ref string) (Ref, error) {
	name, digest, err := ParseRef(ref)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Name: name, Digest: digest}, nil
}

// Pinned says whether r names exactly one build.
func (r Ref) Pinned() bool { return r.Digest != "" }

// String is r's wire form: "name", or "name@sha256:…" when pinned.
func (r Ref) String() string {
	if r.Digest == "" {
		return r.Name
	}
	return r.Name + "@" + r.Digest
}
