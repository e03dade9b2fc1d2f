package dev.spanprof.otel;

import io.opentelemetry.sdk.autoconfigure.spi.AutoConfigurationCustomizer;
import io.opentelemetry.sdk.autoconfigure.spi.AutoConfigurationCustomizerProvider;
import java.util.Collections;

/**
 * Installs spanprof-otel from SDK autoconfigure, which the Java agent runs for its extensions and
 * AutoConfiguredOpenTelemetrySdk runs for applications: the properties step comes before the
 * context storage is first used, so the wrapper takes; the tracer provider step adds the span
 * processor that builds each span's record at its start; the resource step publishes the final
 * resource (this customizer runs last). {@code otel.spanprof.enabled=false} turns it off.
 */
public final class SpanprofCustomizer implements AutoConfigurationCustomizerProvider {
  @Override
  public void customize(AutoConfigurationCustomizer c) {
    c.addPropertiesCustomizer(
        config -> {
          if (config.getBoolean("otel.spanprof.enabled", true)) {
            SpanprofThreadContext.install();
          }
          return Collections.emptyMap();
        });
    c.addTracerProviderCustomizer(
        (builder, config) ->
            config.getBoolean("otel.spanprof.enabled", true)
                ? builder.addSpanProcessor(SpanprofThreadContext.spanProcessor())
                : builder);
    c.addResourceCustomizer(
        (resource, config) -> {
          if (config.getBoolean("otel.spanprof.enabled", true)) {
            SpanprofThreadContext.publishProcessContext(resource);
          }
          return resource;
        });
  }

  @Override
  public int order() {
    return Integer.MAX_VALUE;
  }
}
