package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/space-sandbox/space/internal/store"
)

// pages serves n items as pages of size items, counting the calls.
type pages struct {
	n, size, calls int
	failAt         int // the call that fails (0: none)
	sizes          []int
}

func (p *pages) list(_ context.Context, f store.SandboxFilter) (store.Page[int], error) {
	p.calls++
	p.sizes = append(p.sizes, f.PageSize)
	if p.calls == p.failAt {
		return store.Page[int]{}, errors.New("boom")
	}
	from := 0
	if f.PageToken != "" {
		from, _ = strconv.Atoi(f.PageToken)
	}
	var out store.Page[int]
	for i := from; i < p.n && i < from+p.size; i++ {
		out.Items = append(out.Items, i)
	}
	if from+p.size < p.n {
		out.NextPageToken = strconv.Itoa(from + p.size)
	}
	return out, nil
}

func TestAll(t *testing.T) {
	tests := []struct {
		name            string
		n, size, failAt int
		stopAfter       int // break after this many items (0: never)
		want, calls     int
		wantErr         bool
	}{
		{name: "empty", n: 0, size: 3, want: 0, calls: 1},
		{name: "one page", n: 2, size: 3, want: 2, calls: 1},
		{name: "exact pages", n: 6, size: 3, want: 6, calls: 2},
		{name: "several pages", n: 7, size: 3, want: 7, calls: 3},
		{name: "error on second page", n: 7, size: 3, failAt: 2, want: 3, calls: 2, wantErr: true},
		{name: "break stops asking", n: 9, size: 3, stopAfter: 4, want: 4, calls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pages{n: tt.n, size: tt.size, failAt: tt.failAt}
			var got []int
			var gotErr error
			for it, err := range store.All(context.Background(), p.list, store.SandboxFilter{TenantID: store.AnyTenant}) {
				if err != nil {
					gotErr = err
					break
				}
				got = append(got, it)
				if tt.stopAfter > 0 && len(got) == tt.stopAfter {
					break
				}
			}
			if len(got) != tt.want || p.calls != tt.calls || (gotErr != nil) != tt.wantErr {
				t.Fatalf("got %d items, %d calls, err %v; want %d, %d, err %v", len(got), p.calls, gotErr, tt.want, tt.calls, tt.wantErr)
			}
			for i, v := range got {
				if v != i {
					t.Fatalf("item %d is %d: out of order or repeated", i, v)
				}
			}
			for _, s := range p.sizes {
				if s != store.MaxPageSize {
					t.Fatalf("asked for pages of %d, want MaxPageSize", s)
				}
			}
		})
	}
}
