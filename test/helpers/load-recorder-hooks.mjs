// The loader hook of load-recorder.mjs: records each URL as it is loaded, then loads it as Node would.
import { appendFileSync } from 'node:fs'

const out = process.env.CTXAGENT_TEST_LOADS

export async function load(url, context, nextLoad) {
  if (out) appendFileSync(out, `${url}\n`)
  return nextLoad(url, context)
}
