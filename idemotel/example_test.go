package idemotel_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemotel"
)

func ExampleTelemetry_Do() {
	ctx := context.Background()
	// In a server these are the SDK's providers with real exporters.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	tel, err := idemotel.New(&idemotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{Observer: tel})
	defer store.Close()

	refund := func(ctx context.Context) (idem.Result, error) {
		return idem.Result{Status: 201, Body: []byte(`{"refund":"re_1"}`)}, nil
	}
	req := idem.Request{Scope: "tenant-42", Key: "refund:order-123", Fingerprint: "fp-of-the-body"}
	for range 2 {
		if _, _, err := tel.Do(ctx, store, req, refund); err != nil {
			log.Fatal(err)
		}
	}
	_, _, err = tel.Do(ctx, store, idem.Request{Scope: "tenant-42", Key: "refund:order-123", Fingerprint: "another"}, refund)
	fmt.Println("third:", err != nil)

	for _, s := range spans.GetSpans() {
		for _, a := range s.Attributes {
			if a.Key == idemotel.AttrOutcome {
				fmt.Println(s.Name, a.Value.AsString())
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, p := range sum.DataPoints {
				if kind, ok := p.Attributes.Value(idemotel.AttrRejection); ok {
					fmt.Println(m.Name, kind.Emit(), p.Value)
				} else {
					fmt.Println(m.Name, p.Value)
				}
			}
		}
	}
	// Output:
	// third: true
	// idem.Do executed
	// idem.Do replayed
	// idem.Do mismatch
	// idem.executions 1
	// idem.replays 1
	// idem.rejections mismatch 1
}

func ExampleTelemetry_Middleware() {
	spans := tracetest.NewInMemoryExporter()
	tel, err := idemotel.New(&idemotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(),
	})
	if err != nil {
		log.Fatal(err)
	}
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{Observer: tel})
	defer store.Close()

	refunds := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"refund":"re_1"}`)
	})
	tenant := func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	mw := tel.Middleware(store, idemhttp.Middleware(store, &idemhttp.Options{Scope: tenant}))
	srv := httptest.NewServer(mw(refunds))
	defer srv.Close()

	for _, body := range []string{`{"amount":5}`, `{"amount":5}`, `{"amount":6}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("X-Tenant", "tenant-42")
		resp, err := http.DefaultClient.Do(idemhttp.WithKey(req, "refund:order-123"))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, s := range spans.GetSpans() {
		var outcome, status string
		for _, a := range s.Attributes {
			switch a.Key {
			case idemotel.AttrOutcome:
				outcome = a.Value.Emit()
			case idemotel.AttrHTTPStatus:
				status = a.Value.Emit()
			}
		}
		fmt.Println(s.Name, outcome, status)
	}
	// Output:
	// idem.request executed 201
	// idem.request replayed 201
	// idem.request mismatch 422
}

func ExampleKeyDigest() {
	// An operator holding a key finds its traces by this value.
	fmt.Println(idemotel.KeyDigest("refund:order-123"))
	// Output: d001a327c825704b
}
