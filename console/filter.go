package console

import (
	"net/url"
	"strconv"
	"strings"
)

// DefaultPerPage is how many calls of each list the front page shows at
// once; the query's per (1-100) changes it.
const DefaultPerPage = MaxDetailed

// listFilter is the front page's search and page: q matches, case
// insensitively, a part of a call's session, call id, tool, task or
// status (outcome, decision, evidence; awaiting_approval); page counts
// from 1.
type listFilter struct {
	Q    string
	Page int
	Per  int
}

// filterOf reads q, page and per from a query; out-of-range values are
// the defaults.
func filterOf(vals url.Values) listFilter {
	f := listFilter{Q: strings.TrimSpace(vals.Get("q")), Page: 1, Per: DefaultPerPage}
	if len(f.Q) > 256 {
		f.Q = f.Q[:256]
	}
	if p, err := strconv.Atoi(vals.Get("page")); err == nil && p >= 1 {
		f.Page = p
	}
	if n, err := strconv.Atoi(vals.Get("per")); err == nil && n >= 1 && n <= 100 {
		f.Per = n
	}
	return f
}

// filterList returns the items of xs one of whose fields contains f.Q.
func filterList[T any](xs []T, f listFilter, fields func(T) []string) []T {
	if f.Q == "" {
		return xs
	}
	q := strings.ToLower(f.Q)
	var out []T
	for _, x := range xs {
		for _, s := range fields(x) {
			if strings.Contains(strings.ToLower(s), q) {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

// pageOf returns the items of xs on f's page.
func pageOf[T any](f listFilter, xs []T) []T {
	from := (f.Page - 1) * f.Per
	if from >= len(xs) {
		return nil
	}
	return xs[from:min(from+f.Per, len(xs))]
}

// Pages is how many pages n items fill (at least 1).
func (f listFilter) Pages(n int) int { return max(1, (n+f.Per-1)/f.Per) }

// URL is the front page's URL for page p with the same search.
func (f listFilter) URL(p int) string {
	v := url.Values{}
	if f.Q != "" {
		v.Set("q", f.Q)
	}
	if f.Per != DefaultPerPage {
		v.Set("per", strconv.Itoa(f.Per))
	}
	if p > 1 {
		v.Set("page", strconv.Itoa(p))
	}
	if len(v) == 0 {
		return "/"
	}
	return "/?" + v.Encode()
}

// Prev and Next are the neighbouring page numbers.
func (f listFilter) Prev() int { return f.Page - 1 }
func (f listFilter) Next() int { return f.Page + 1 }

// pagerView is what the pager template shows for one list.
type pagerView struct {
	List             string
	Page, Pages      int
	PrevURL, NextURL string
}

// pager is the template function that builds a list's pagerView.
func pager(f listFilter, n int, list string) pagerView {
	return pagerView{List: list, Page: f.Page, Pages: f.Pages(n), PrevURL: f.URL(f.Prev()), NextURL: f.URL(f.Next())}
}
