import type { Param, Shape, Tool, ToolContext, ToolOutcome, Validation } from './types.js'

/*
 * A built-in tool's arguments, defined once as a table of parameters: the JSON Schema offered
 * to the model is written from it here, and the validator (zod/mini, src/tools/arguments.ts)
 * is built from it at the first call of a tool. So a run reaches its first LLM request
 * without loading zod at all (docs/development.md#start-up); a task whose model calls no
 * tool never loads it. test/tools/schema.test.ts holds the schema written here equal, byte
 * for byte, to zod's own toJSONSchema of the validator.
 */

type ValueOf<P> = P extends Param<infer T> ? T : never

/** The arguments a tool's `run` gets: defaulted parameters always present, optional ones possibly absent. */
export type ArgsOf<S extends Shape> = { [K in keyof S as S[K] extends Param<unknown, true> ? never : K]: ValueOf<S[K]> } & {
  [K in keyof S as S[K] extends Param<unknown, true> ? K : never]?: ValueOf<S[K]>
}

type JsonSchema = Record<string, unknown>

export interface ToolDefinition<S extends Shape> {
  name: string
  description: string
  /** The arguments, defined once: the JSON Schema offered to the model and the validator both come from it. */
  parameters: S
  run(args: ArgsOf<S>, ctx: ToolContext): Promise<ToolOutcome>
}

/** A Tool from its definition: the OpenAI spec, and a lenient validator built at its first use. */
export function defineTool<S extends Shape>(def: ToolDefinition<S>): Tool {
  const parameters = jsonSchemaOf(def.parameters)
  const properties = parameters.properties as Record<string, JsonSchema>
  const expected = `the arguments of ${def.name} are ${JSON.stringify(parameters)}`
  let validator: ((input: Record<string, unknown>) => Validation) | null = null
  return {
    name: def.name,
    spec: { type: 'function', function: { name: def.name, description: def.description, parameters } },
    async validate(args) {
      if (args === null || typeof args !== 'object' || Array.isArray(args)) {
        return { ok: false, error: `the arguments must be a JSON object, not ${Array.isArray(args) ? 'an array' : typeof args}; ${expected}` }
      }
      validator ??= (await import('./arguments.js')).validatorOf(def.parameters, properties, expected)
      return validator(coerce(args as Record<string, unknown>, properties))
    },
    run: (args, ctx) => def.run(args as ArgsOf<S>, ctx),
  }
}

/**
 * The JSON Schema of the arguments as zod's toJSONSchema (io: input) writes it, less noise a
 * model does not need: no `$schema`, no safe-integer bounds. Same keys in the same order, so
 * the tools' bytes at the head of every request stay as they were.
 */
export function jsonSchemaOf(shape: Shape): JsonSchema {
  const properties: Record<string, JsonSchema> = {}
  const required: string[] = []
  for (const [key, p] of Object.entries(shape)) {
    properties[key] = propertyOf(p)
    if (!p.optional && p.default === undefined) required.push(key)
  }
  return { type: 'object', properties, ...(required.length > 0 ? { required } : {}) }
}

function propertyOf(p: Param<unknown>): JsonSchema {
  const bounds = { ...(p.minimum !== undefined ? { minimum: p.minimum } : {}), ...(p.maximum !== undefined ? { maximum: p.maximum } : {}) }
  const values = p.values !== undefined ? { enum: [...p.values] } : {}
  // zod writes a defaulted field's default and description first, then its type; a plain one's type first.
  if (p.default !== undefined) return { default: p.default, description: p.description, type: p.kind, ...bounds, ...values }
  return { type: p.kind, ...bounds, ...values, description: p.description }
}

/**
 * Lenient the way weak local models need: "5" → 5 and "true" → true where the schema
 * wants a number or a boolean, and null for a field treated as absent (so its default
 * applies). Anything else is left for the validator to judge.
 */
function coerce(args: Record<string, unknown>, properties: Record<string, JsonSchema>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(args)) {
    if (value === null) continue
    const type = properties[key]?.type
    if (typeof value === 'string' && (type === 'integer' || type === 'number') && /^\s*-?\d+(\.\d+)?\s*$/.test(value)) out[key] = Number(value)
    else if (typeof value === 'string' && type === 'boolean' && /^\s*(true|false)\s*$/i.test(value)) out[key] = value.trim().toLowerCase() === 'true'
    else out[key] = value
  }
  return out
}

/** Parameter builders, so each tool's shape reads as a table. */
export const param = {
  text: (description: string): Param<string, false> => ({ kind: 'string', description, optional: false }),
  textWithDefault: (description: string, defaultValue: string): Param<string, false> => ({
    kind: 'string',
    description,
    optional: false,
    default: defaultValue,
  }),
  optionalText: (description: string): Param<string, true> => ({ kind: 'string', description, optional: true }),
  int: (description: string, defaultValue: number, min = 1, max?: number): Param<number, false> => ({
    kind: 'integer',
    description,
    optional: false,
    default: defaultValue,
    minimum: min,
    ...(max !== undefined ? { maximum: max } : {}),
  }),
  optionalInt: (description: string, min = 1): Param<number, true> => ({ kind: 'integer', description, optional: true, minimum: min }),
  flag: (description: string, defaultValue: boolean): Param<boolean, false> => ({ kind: 'boolean', description, optional: false, default: defaultValue }),
  oneOf: <const T extends readonly [string, ...string[]]>(values: T, description: string, defaultValue: T[number]): Param<T[number], false> => ({
    kind: 'string',
    description,
    optional: false,
    default: defaultValue,
    values,
  }),
}

/** A successful outcome. */
export const ok = (output: string): ToolOutcome => ({ output, status: 'success', error: null })
