'use strict'
// Spans of known CPU work under dd-trace, across an await (so the
// AsyncContextFrame changes inside a span), with CPU work outside spans in
// between. Writes its own view of every span, with CLOCK_MONOTONIC start and
// end and its on-CPU stretches, one JSON line each, to argv[2]; "ready" on stdout once the writer is on.
const fs = require('fs')
const tracer = require('dd-trace').init({ flushInterval: 60000 })

const out = fs.openSync(process.argv[2], 'w')
const spans = Number(process.argv[3] || 20)
const burnMs = Number(process.argv[4] || 60)

function burn (ms) {
  const end = process.hrtime.bigint() + BigInt(ms) * 1000000n
  let x = 0
  while (process.hrtime.bigint() < end) x += Math.sqrt(x + 1)
  return x
}
// CLOCK_MONOTONIC (hrtime) to Unix time, for the profile's timestamps.
const { performance } = require('perf_hooks')
const monoToUnix = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)) - process.hrtime.bigint()

const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))

async function main () {
  // The writer starts with the first activation; one span before "ready".
  await tracer.trace('warmup', async () => { await sleep(1) })
  process.stdout.write('ready\n')
  if (process.env.SPANWORK_WAIT) {
    // Start when told (a line on stdin): a profiler attaches meanwhile.
    await new Promise(resolve => process.stdin.once('data', resolve))
    process.stdin.pause()
  }
  await sleep(300)
  for (let i = 0; i < spans; i++) {
    burn(burnMs / 2) // outside any span
    await tracer.trace('work', async (span) => {
      const ctx = span.context()
      const start = process.hrtime.bigint()
      // The on-CPU stretches of the span: between them it waits (no JS of
      // the span runs), and each await resumes in a new AsyncContextFrame.
      const cpu = []
      const work = () => {
        const s = process.hrtime.bigint()
        burn(burnMs)
        cpu.push([s.toString(), process.hrtime.bigint().toString()])
      }
      work()
      await sleep(5)
      work()
      await new Promise(resolve => setImmediate(resolve))
      work()
      const end = process.hrtime.bigint()
      fs.writeSync(out, JSON.stringify({
        trace_id: ctx.toTraceId(true), span_id: ctx.toSpanId(true),
        start_ns: start.toString(), end_ns: end.toString(), cpu, mono_to_unix_ns: monoToUnix.toString()
      }) + '\n')
    })
  }
  burn(burnMs / 2)
  fs.closeSync(out)
  process.stdout.write('done\n')
  process.exit(0)
}
main()
