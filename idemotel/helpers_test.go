package idemotel_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
)

// rig is a Telemetry on the SDK's in-memory span exporter and manual
// metric reader, and a store on a real Badger directory with a fake clock.
type rig struct {
	tel    *idemotel.Telemetry
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	clock  *idemtest.Clock
	store  *idem.Store
}

var epoch = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// newRig opens the store with opts (nil for defaults); the store's
// Observer is the Telemetry, its clock a fake one, its sweep off. wrap, if
// set, wraps the Badger backend.
func newRig(t testing.TB, opts *idem.Options, wrap func(backend.Backend, *idemtest.Clock) backend.Backend,
	tune ...func(*idemotel.Options)) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(),
		clock: idemtest.NewClock(epoch)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	to := idemotel.Options{TracerProvider: tp, MeterProvider: mp, Clock: r.clock}
	for _, f := range tune {
		f(&to)
	}
	tel, err := idemotel.New(&to)
	if err != nil {
		t.Fatalf("idemotel.New: %v", err)
	}
	r.tel = tel
	var o idem.Options
	if opts != nil {
		o = *opts
	}
	o.Observer, o.Clock, o.SweepInterval = tel, r.clock, -1
	dir := t.TempDir()
	if wrap == nil {
		r.store, err = idem.Open(dir, &o)
	} else {
		var b *badgerstore.Backend
		b, err = badgerstore.Open(dir, badgerstore.Options{})
		if err == nil {
			r.store = idem.New(wrap(b, r.clock), &o)
		}
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := r.store.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
		if n := r.tel.Watching(); n != 0 {
			t.Errorf("%d watches left registered", n)
		}
	})
	return r
}

// spanView is what a test asserts about a span: its name, attributes as
// strings, and status.
type spanView struct {
	Name   string
	Attrs  map[string]string
	Status codes.Code
	Desc   string
}

// ended returns the spans ended so far, in order, and forgets them.
func (r *rig) ended() []spanView {
	var out []spanView
	for _, s := range r.spans.GetSpans() {
		v := spanView{Name: s.Name, Attrs: map[string]string{}, Status: s.Status.Code, Desc: s.Status.Description}
		for _, a := range s.Attributes {
			v.Attrs[string(a.Key)] = a.Value.Emit()
		}
		out = append(out, v)
	}
	r.spans.Reset()
	return out
}

// hist is one histogram series: how many values and their sum.
type hist struct {
	Count uint64
	Sum   float64
}

// metrics collects every series as "name{k=v}" -> value: counters as
// int64, histograms as hist. Series with a zero count are left out.
func (r *rig) metrics(t testing.TB) map[string]any {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	out := map[string]any{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Errorf("instrumentation scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Value != 0 {
						out[m.Name+series(p.Attributes)] = p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Count != 0 {
						out[m.Name+series(p.Attributes)] = hist{p.Count, p.Sum}
					}
				}
			default:
				t.Errorf("metric %s has unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func series(set attribute.Set) string {
	if set.Len() == 0 {
		return ""
	}
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
	}
	sort.Strings(kv)
	return fmt.Sprint(kv)
}
