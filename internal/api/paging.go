package api

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// maxPageToken bounds a page_token: every token we hand out is far shorter.
const maxPageToken = 1024

// tokenEncoding is the alphabet of every page token, the store's and ours.
// Strict: a token has one spelling, so a fuzzed variant of a real token is
// not silently the same token.
var tokenEncoding = base64.RawURLEncoding.Strict()

// pageRequest reads ?page_size= and ?page_token= for every listing, and is
// the one place a page_token is checked before a listing reads it: a token
// no listing could have handed out is a 400 here, whether the store or
// pageInMemory would go on to read it.
func pageRequest(r *http.Request) (store.PageRequest, error) {
	q := r.URL.Query()
	var pr store.PageRequest
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return pr, invalid(map[string]string{"page_size": "must be a non-negative integer"})
		}
		pr.PageSize = min(n, store.MaxPageSize)
	}
	pr.PageToken = q.Get("page_token")
	if pr.PageToken != "" {
		if _, err := decodePageToken(pr.PageToken); err != nil {
			return pr, err
		}
	}
	return pr, nil
}

// errPageToken is the answer to any page_token a listing did not hand out.
// The message is the store's, so every listing answers alike.
func errPageToken() error {
	return errdefs.New(errdefs.ErrInvalidArgument, "invalid page_token").
		WithDetails(map[string]any{"fields": map[string]string{"page_token": "must be the next_page_token of a previous page of this listing"}})
}

// decodePageToken checks the shape every page token has and returns its
// bytes.
func decodePageToken(tok string) ([]byte, error) {
	if len(tok) > maxPageToken {
		return nil, errPageToken()
	}
	b, err := tokenEncoding.DecodeString(tok)
	if err != nil || len(b) == 0 {
		return nil, errPageToken()
	}
	return b, nil
}

// memToken is the page token of an in-memory listing: the listing it
// belongs to (its path) and the last key handed out. Naming the listing
// lets pageInMemory refuse a token that is not its own, rather than read
// any bytes as a position.
func memToken(listing, key string) string {
	return tokenEncoding.EncodeToString([]byte(listing + "\x00" + key))
}

// memTokenKey reads a memToken of listing back into its key.
func memTokenKey(listing, tok string) (string, error) {
	b, err := decodePageToken(tok)
	if err != nil {
		return "", err
	}
	key, ok := strings.CutPrefix(string(b), listing+"\x00")
	if !ok || key == "" {
		return "", errPageToken()
	}
	return key, nil
}

// pageInMemory pages a short listing that is already in memory and ordered
// by key (template builds, secrets): the token is the last key handed out,
// so it stays right while items are added or removed between pages.
func pageInMemory[T any](r *http.Request, items []T, key func(T) string) (page []T, next string, err error) {
	pr, err := pageRequest(r)
	if err != nil {
		return nil, "", err
	}
	listing := r.URL.Path
	start := 0
	if pr.PageToken != "" {
		after, err := memTokenKey(listing, pr.PageToken)
		if err != nil {
			return nil, "", err
		}
		for start < len(items) && key(items[start]) <= after {
			start++
		}
	}
	n := pr.PageSize
	if n == 0 {
		n = store.DefaultPageSize
	}
	end := min(start+n, len(items))
	if end < len(items) {
		next = memToken(listing, key(items[end-1]))
	}
	return items[start:end], next, nil
}
