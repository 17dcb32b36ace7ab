package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// goTypeRE matches what encoding/json's own messages say of Go types.
var goTypeRE = regexp.MustCompile(`Go (value|struct)|unmarshal|\b(egress)\.[A-Z]`)

// FuzzParsePolicy: a network object either parses into a policy that
// compiles and survives a round trip through its JSON form, or is one
// invalid-argument error whose fields all lie under "network" and whose
// words name no Go type. Seeds (testdata/fuzz/FuzzParsePolicy) hold the
// inputs of issue 9's defect 11.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"egress":{"default":"deny","allow":["pypi.org","*.github.com","203.0.113.0/24"]},"inject":[{"domain":"api.example","header":"Authorization","value":"Bearer ${secret:k}"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			var pub *errdefs.Public
			if !errors.As(err, &pub) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not invalid_argument", err)
			}
			if len(pub.Details) == 0 {
				t.Fatalf("error %q names no field", pub.Message)
			}
			// Field names may echo the input's keys; the words around
			// them are ours and must name no Go type.
			msg := pub.Message
			for field, why := range pub.Details {
				if field != "network" && !strings.HasPrefix(field, "network.") {
					t.Fatalf("field %q is not under network", field)
				}
				if goTypeRE.MatchString(why.(string)) {
					t.Fatalf("%s: %v names Go types", field, why)
				}
				msg = strings.ReplaceAll(msg, field, "")
			}
			if goTypeRE.MatchString(msg) {
				t.Fatalf("message %q names Go types", pub.Message)
			}
			return
		}
		if _, err := compile(p); err != nil {
			t.Fatalf("parsed policy does not compile: %v", err)
		}
		for _, in := range p.Inject {
			if strings.ContainsAny(in.Value, "\r\n\x00") {
				t.Fatalf("inject value %q would split a header", in.Value)
			}
		}
		once, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParsePolicy(once)
		if err != nil {
			t.Fatalf("re-parse %s: %v", once, err)
		}
		if twice, _ := json.Marshal(again); !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the policy:\n%s\n%s", once, twice)
		}
	})
}

// TestParsePolicyMessages (issue 9, defect 11): a network object of the
// wrong shape is told what was expected, under the field Validate uses.
func TestParsePolicyMessages(t *testing.T) {
	for _, tc := range []struct{ in, field, problem string }{
		{`[]`, "network", "must be a JSON object, not an array"},
		{`"deny"`, "network", "must be a JSON object, not a string"},
		{`{"egress":[]}`, "network.egress", "must be a JSON object, not an array"},
		{`{"egress":{"default":1}}`, "network.egress.default", "must be a string, not a number"},
		{`{"egress":{"allow":"pypi.org"}}`, "network.egress.allow", "must be an array of strings, not a string"},
		{`{"inject":{}}`, "network.inject", "must be an array of objects, not an object"},
		{`{"inject":[{"domain":"a.test","header":"X","value":"v","extra":1}]}`, "network.inject[0].extra", "is not a known field"},
		{`{"egress":{}} {}`, "network", "must hold a single JSON value"},
		{`{"egress":`, "network", "is truncated JSON"},
	} {
		_, err := ParsePolicy([]byte(tc.in))
		var pub *errdefs.Public
		if !errors.As(err, &pub) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", tc.in, err)
			continue
		}
		if got := pub.Details[tc.field]; got != tc.problem {
			t.Errorf("%s: details %v, want %s: %s", tc.in, pub.Details, tc.field, tc.problem)
		}
		if goTypeRE.MatchString(pub.Message) {
			t.Errorf("%s: message %q names Go types", tc.in, pub.Message)
		}
	}
}
