import * as z from 'zod/mini'
import { describe, expect, it } from 'vitest'
import { zodObjectOf } from '../../src/tools/arguments.js'
import { ToolRegistry } from '../../src/tools/registry.js'
import { jsonSchemaOf, param } from '../../src/tools/schema.js'
import type { Shape } from '../../src/tools/types.js'

/*
 * The tools' JSON Schemas are written by hand from their parameters (src/tools/schema.ts), so
 * that a run offers them without loading zod. These hold them to zod's own: every builder, with
 * and without its optional arguments, written as zod's toJSONSchema writes the validator built
 * from it; and the built-in tools' schemas byte for byte as they were when zod wrote them (the
 * head of every request: a change there costs every provider's prompt cache).
 */

/** zod's JSON Schema of a shape's validator, less what jsonSchemaOf leaves out (`$schema`, the safe-integer bounds). */
function zodSchema(shape: Shape): Record<string, unknown> {
  const out = z.toJSONSchema(zodObjectOf(shape), { io: 'input' }) as Record<string, unknown>
  delete out.$schema
  for (const property of Object.values(out.properties as Record<string, Record<string, unknown>>)) {
    if (property.maximum === Number.MAX_SAFE_INTEGER) delete property.maximum
    if (property.minimum === Number.MIN_SAFE_INTEGER) delete property.minimum
  }
  return out
}

/** The built-in tools' parameters as zod wrote them before the schemas were written by hand. */
const BEFORE: Record<string, string> = {
  read_file:
    '{"type":"object","properties":{"path":{"type":"string","description":"path relative to the workspace"},"offset":{"default":1,"description":"first line to show (1-based)","type":"integer","minimum":1},"limit":{"default":2000,"description":"how many lines to show (at most 2000)","type":"integer","minimum":1,"maximum":2000}},"required":["path"]}',
  list_dir:
    '{"type":"object","properties":{"path":{"default":".","description":"directory relative to the workspace","type":"string"},"depth":{"default":2,"description":"how many levels to show","type":"integer","minimum":1,"maximum":10},"limit":{"default":200,"description":"most entries to show","type":"integer","minimum":1,"maximum":1000}}}',
  glob: '{"type":"object","properties":{"pattern":{"type":"string","description":"glob pattern, relative to path"},"path":{"type":"string","description":"directory to search in, relative to the workspace (default: the workspace)"}},"required":["pattern"]}',
  grep: '{"type":"object","properties":{"pattern":{"type":"string","description":"regular expression (RE2 syntax, e.g. \\"foo\\\\(\\", \\"(?i)todo\\")"},"path":{"type":"string","description":"file or directory to search, relative to the workspace (default: the workspace)"},"include":{"type":"string","description":"only files matching this glob, e.g. \\"*.ts\\""},"limit":{"default":100,"description":"most matching lines to show","type":"integer","minimum":1,"maximum":1000}},"required":["pattern"]}',
  edit_file:
    '{"type":"object","properties":{"path":{"type":"string","description":"path relative to the workspace"},"old_string":{"type":"string","description":"the exact text to replace"},"new_string":{"type":"string","description":"the text to put in its place"},"replace_all":{"default":false,"description":"replace every occurrence","type":"boolean"}},"required":["path","old_string","new_string"]}',
  write_file:
    '{"type":"object","properties":{"path":{"type":"string","description":"path relative to the workspace"},"content":{"type":"string","description":"the whole new content of the file"}},"required":["path","content"]}',
  inspect:
    '{"type":"object","properties":{"blob":{"type":"string","description":"the blob id: the 64 hex digits of [blob:<id>]"},"offset":{"default":1,"description":"first line to show (1-based)","type":"integer","minimum":1},"limit":{"default":200,"description":"how many lines to show (at most 2000)","type":"integer","minimum":1,"maximum":2000},"grep":{"type":"string","description":"only lines matching this regular expression (RE2 syntax, e.g. \\"(?i)error\\")"}},"required":["blob"]}',
  finish:
    '{"type":"object","properties":{"summary":{"type":"string","description":"what was changed and why, or what blocks the task"},"status":{"default":"done","description":"\\"done\\" when the task is complete, \\"blocked\\" when it cannot be completed","type":"string","enum":["done","blocked"]}},"required":["summary"]}',
  run_command:
    '{"type":"object","properties":{"command":{"type":"string","description":"the command line"},"timeout_seconds":{"type":"integer","minimum":1,"description":"kill it after this many seconds (default 120, at most 600)"}},"required":["command"]}',
}

describe("the tools' JSON Schemas", () => {
  it('are what zod writes for every parameter builder', () => {
    const shapes: Shape[] = [
      { a: param.text('a text') },
      { a: param.textWithDefault('a text', '.') },
      { a: param.optionalText('a text') },
      { a: param.int('a number', 3) },
      { a: param.int('a number', 3, 0) },
      { a: param.int('a number', 3, 1, 9) },
      { a: param.optionalInt('a number') },
      { a: param.optionalInt('a number', 5) },
      { a: param.flag('a flag', false) },
      { a: param.flag('a flag', true) },
      { a: param.oneOf(['x', 'y'], 'a choice', 'y') },
      { a: param.text('a'), b: param.optionalText('b'), c: param.int('c', 1, 1, 5), d: param.flag('d', true), e: param.oneOf(['p', 'q'], 'e', 'p') },
    ]
    for (const shape of shapes) expect(JSON.stringify(jsonSchemaOf(shape))).toBe(JSON.stringify(zodSchema(shape)))
  })

  it('are, for the built-in tools, byte for byte what zod wrote before', () => {
    const now = Object.fromEntries(
      ToolRegistry.builtin({ allowShell: true })
        .specs()
        .map((s) => [s.function.name, JSON.stringify(s.function.parameters)]),
    )
    expect(now).toEqual(BEFORE)
  })
})
