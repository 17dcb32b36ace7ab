package store

import (
	"context"
	"iter"
)

// All yields every item that list returns for filter f, page after page
// (MaxPageSize items a page, from f's PageToken on), and stops at the last
// page, at the first error (yielded with a zero item) or when the loop
// breaks. Each page is asked for only when the loop has used the one
// before.
//
//	for sb, err := range store.All(ctx, st.ListSandboxes, store.SandboxFilter{TenantID: store.AnyTenant}) {
func All[T, F any, PF interface {
	*F
	paging() *PageRequest
}](ctx context.Context, list func(context.Context, F) (Page[T], error), f F) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		pr := PF(&f).paging()
		pr.PageSize = MaxPageSize
		for {
			page, err := list(ctx, f)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range page.Items {
				if !yield(it, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			pr.PageToken = page.NextPageToken
		}
	}
}

func (pr *PageRequest) paging() *PageRequest { return pr }
