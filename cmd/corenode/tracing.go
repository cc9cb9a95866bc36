package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	tracesdk "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
)

// tracingConfig is etcd's distributed tracing flags.
type tracingConfig struct {
	enabled                    bool
	address, service, instance string
	samplingRatePerMillion     int
}

// newTracing is etcd's distributed tracing: an OpenTelemetry span for
// every client gRPC call, exported over OTLP/gRPC (plain text, as etcd's)
// to the collector at address, sampled rate in a million (0: none, unless
// the caller's trace is sampled). stop flushes and ends the export.
func newTracing(ctx context.Context, c tracingConfig) (opt grpc.ServerOption, stop func(context.Context) error, err error) {
	if c.samplingRatePerMillion < 0 || c.samplingRatePerMillion > 1_000_000 {
		return nil, nil, fmt.Errorf("--distributed-tracing-sampling-rate %d: want 0 to 1000000 (per million)", c.samplingRatePerMillion)
	}
	exporter, err := otlptracegrpc.New(ctx, otlptracegrpc.WithInsecure(), otlptracegrpc.WithEndpoint(c.address))
	if err != nil {
		return nil, nil, fmt.Errorf("--distributed-tracing-address %s: %w", c.address, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", c.service)}
	if c.instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", c.instance))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...))
	if err != nil {
		return nil, nil, fmt.Errorf("distributed tracing: %w", err)
	}
	sampler := tracesdk.NeverSample()
	switch {
	case c.samplingRatePerMillion >= 1_000_000:
		sampler = tracesdk.AlwaysSample()
	case c.samplingRatePerMillion > 0:
		sampler = tracesdk.TraceIDRatioBased(float64(c.samplingRatePerMillion) / 1_000_000)
	}
	tp := tracesdk.NewTracerProvider(tracesdk.WithBatcher(exporter), tracesdk.WithResource(res),
		tracesdk.WithSampler(tracesdk.ParentBased(sampler)))
	h := otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))
	return grpc.StatsHandler(h), tp.Shutdown, nil
}
