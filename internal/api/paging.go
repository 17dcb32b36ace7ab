package api

import (
	"encoding/base64"
	"net/http"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// pageInMemory pages a short listing that is already in memory and ordered
// by key (template builds, secrets): the token is the last key handed out,
// so it stays right while items are added or removed between pages.
func pageInMemory[T any](r *http.Request, items []T, key func(T) string) (page []T, next string, err error) {
	pr, err := pageRequest(r)
	if err != nil {
		return nil, "", err
	}
	start := 0
	if pr.PageToken != "" {
		after, err := base64.RawURLEncoding.DecodeString(pr.PageToken)
		if err != nil || len(after) == 0 {
			return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "invalid page_token")
		}
		for start < len(items) && key(items[start]) <= string(after) {
			start++
		}
	}
	n := pr.PageSize
	if n == 0 {
		n = store.DefaultPageSize
	}
	end := min(start+n, len(items))
	if end < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(key(items[end-1])))
	}
	return items[start:end], next, nil
}
