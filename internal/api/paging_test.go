package api

import (
	"encoding/json"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// TestSecretsPaginated: the secrets listing pages by name like every other
// listing: page_size, next_page_token, and a bad token is a 400.
func TestSecretsPaginated(t *testing.T) {
	e := newEnv(t, Config{})
	withSecrets(t, e)
	for _, name := range []string{"c-three", "a-one", "b-two"} {
		if st, _, body := e.do("PUT", "/v1/secrets/"+name, e.aliceKey, []byte(`{"value":"v"}`)); st != 201 {
			t.Fatalf("put %s: %d %s", name, st, body)
		}
	}
	list := func(query string) (int, apiv1.SecretList) {
		st, _, body := e.do("GET", "/v1/secrets"+query, e.aliceKey, nil)
		var l apiv1.SecretList
		json.Unmarshal(body, &l)
		return st, l
	}
	st, first := list("?page_size=2")
	if st != 200 || len(first.Secrets) != 2 || first.Secrets[0].Name != "a-one" || first.Secrets[1].Name != "b-two" || first.NextPageToken == "" {
		t.Fatalf("first page: %d %+v", st, first)
	}
	st, second := list("?page_size=2&page_token=" + first.NextPageToken)
	if st != 200 || len(second.Secrets) != 1 || second.Secrets[0].Name != "c-three" || second.NextPageToken != "" {
		t.Fatalf("second page: %d %+v", st, second)
	}
	if st, _ := list("?page_token=%25%25"); st != 400 {
		t.Errorf("bad page token = %d, want 400", st)
	}
	if st, all := list(""); st != 200 || len(all.Secrets) != 3 {
		t.Errorf("default page: %d %+v", st, all)
	}
}
