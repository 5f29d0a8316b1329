// Package httpresp turns what a handler answered into an *http.Response, for
// the tests of every module: the Fiber doors' tests serve a fasthttp
// RequestCtx without a network, and all of them read bodies the same way.
package httpresp

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"
)

// FromFastHTTP returns ctx's response as net/http has it, with a copy of
// the body: fasthttp reuses ctx's buffers.
func FromFastHTTP(ctx *fasthttp.RequestCtx) *http.Response {
	r := &http.Response{
		StatusCode: ctx.Response.StatusCode(),
		Header:     http.Header{},
		Body:       io.NopCloser(bytes.NewReader(bytes.Clone(ctx.Response.Body()))),
	}
	for k, v := range ctx.Response.Header.All() {
		r.Header.Add(string(k), string(v))
	}
	return r
}

// Body reads r's body, failing t when it cannot.
func Body(t testing.TB, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}
