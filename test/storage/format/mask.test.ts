import { afterEach, describe, expect, it } from 'vitest'
import { parseConfig } from '../../../src/config/load.js'
import { secretValues, urlWithCredentials } from '../../../src/config/secrets.js'
import { installSecrets, maskCredentials, maskText, maskValue } from '../../../src/storage/format/mask.js'

const POSITIVES: [string, string, string][] = [
  ['github classic', 'token ghp_1234567890abcdefghijABCDEFGHIJ123456 here', 'token [GITHUB_TOKEN] here'],
  ['github oauth', 'gho_abcdefghijklmnopqrstuvwxyz0123456789', '[GITHUB_TOKEN]'],
  ['github user-to-server', 'ghu_abcdefghijklmnopqrstuvwxyz0123456789', '[GITHUB_TOKEN]'],
  ['github server', 'ghs_abcdefghijklmnopqrstuvwxyz0123456789', '[GITHUB_TOKEN]'],
  ['github refresh', 'ghr_abcdefghijklmnopqrstuvwxyz0123456789', '[GITHUB_TOKEN]'],
  ['github fine-grained', 'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz', '[GITHUB_TOKEN]'],
  ['openai', 'OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz012345', 'OPENAI_API_KEY=[OPENAI_KEY]'],
  ['openai project', 'sk-proj-abcdefghijklmnopqrstuvwxyz_0123-456', '[OPENAI_KEY]'],
  ['anthropic', 'sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789', '[ANTHROPIC_KEY]'],
  ['gitlab', 'glpat-abcdefghijklmnopqrst', '[GITLAB_TOKEN]'],
  ['email', 'mail alice.smith+ci@example.co.jp now', 'mail [EMAIL] now'],
  ['email in quotes', '"author": "bob@corp.example.com"', '"author": "[EMAIL]"'],
  ['aws access key id', 'AKIAIOSFODNN7EXAMPLE', '[AWS_ACCESS_KEY]'],
  ['aws secret', 'aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'aws_secret_access_key = [AWS_SECRET_KEY]'],
  ['slack bot', 'xoxb-123456789012-1234567890123-abcdefghijklmnop', '[SLACK_TOKEN]'],
  ['slack user', 'xoxp-123456789012-abcdef', '[SLACK_TOKEN]'],
  ['private key block', 'key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nend', 'key:\n[PRIVATE_KEY]\nend'],
  ['openssh private key', '-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----', '[PRIVATE_KEY]'],
  ['jwt', 'Authorization: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U', 'Authorization: [JWT]'],
  ['google', 'key=AIzaSyA1234567890abcdefghijklmnopqrstuv', 'key=[GOOGLE_API_KEY]'],
  ['stripe live', 'sk_live_1234567890abcdefghijklmn', '[STRIPE_KEY]'],
  ['bearer header', 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz.0123', 'Authorization: Bearer [TOKEN]'],
  ['npm token', 'npm_abcdefghijklmnopqrstuvwxyz0123456789', '[NPM_TOKEN]'],
]

const NEGATIVES: [string, string][] = [
  ['npm package version', 'npm install lodash@4.17.21'],
  ['scoped package version', 'npm i @types/node@20.11.5 @scope/pkg@latest'],
  ['github action ref', 'uses: actions/checkout@v4'],
  ['docker digest', 'image@sha256:abcdef0123456789'],
  ['dist tag', 'uuid@latest'],
  ['ssh remote', 'git clone git@github.com:owner/repo.git'],
  ['decorator', '@Component({ selector: "app" })'],
  ['code', 'const sk = task-management; if (a@b) return; x.y@z'],
  ['short sk- word', 'use the sk-learn style ask-me flag'],
  ['python matrix multiply', 'result = a @ b.T'],
  ['css at-rule', '@media screen and (max-width: 600px)'],
  ['version range', 'react@^18.2.0 || vue@3.x'],
  ['plain uuid', '550e8400-e29b-41d4-a716-446655440000'],
  ['hex sha', 'commit 9fceb02d0ae598e95dc970b74767f19372d61af8'],
]

describe('maskText', () => {
  it.each(POSITIVES)('masks %s', (_name, input, expected) => {
    expect(maskText(input)).toBe(expected)
  })

  it.each(NEGATIVES)('leaves %s alone', (_name, input) => {
    expect(maskText(input)).toBe(input)
  })

  it('finds every secret at the start, in the middle and at the end of code full of - _ @ and A', () => {
    const code = 'const user_id = x-request-id; --dry-run @@ -1,2 +1,3 @@ @Component lodash@4.17.21 ASIA_NOT max_retries'
    for (const [name, input, expected] of POSITIVES) {
      expect(maskText(`${input} ${code}`), `${name} at the start`).toBe(`${expected} ${code}`)
      expect(maskText(`${code}\n${input}\n${code}`), `${name} in the middle`).toBe(`${code}\n${expected}\n${code}`)
      expect(maskText(`${code} ${input}`), `${name} at the end`).toBe(`${code} ${expected}`)
    }
  })

  it('masks several kinds of secret in one text', () => {
    const text = 'a@example.com then sk-abcdefghijklmnopqrstuvwxyz012345 then ghp_1234567890abcdefghijABCDEFGHIJ123456 then b@example.org'
    expect(maskText(text)).toBe('[EMAIL] then [OPENAI_KEY] then [GITHUB_TOKEN] then [EMAIL]')
  })

  it('is idempotent', () => {
    for (const [, input] of POSITIVES) expect(maskText(maskText(input))).toBe(maskText(input))
  })
})

describe('maskValue', () => {
  it('masks every string inside nested values and keeps keys and other types', () => {
    const value = { path: 'a.txt', env: { token: 'ghp_1234567890abcdefghijABCDEFGHIJ123456' }, list: ['x@example.org', 3, null, true] }
    expect(maskValue(value)).toEqual({ path: 'a.txt', env: { token: '[GITHUB_TOKEN]' }, list: ['[EMAIL]', 3, null, true] })
  })
})

describe('installed secret values', () => {
  afterEach(() => installSecrets([]))

  it('masks each value in its plain, URL-encoded, JSON-escaped and base64 forms, longest first, and only values of 8 characters or more', () => {
    installSecrets([
      { name: 'llm.openai.api_key', value: 'k/ey+with"quote=1' },
      { name: 'SHORT', value: 'ollama' },
    ])
    const value = 'k/ey+with"quote=1'
    expect(maskText(`a ${value} b`)).toBe('a [SECRET:llm.openai.api_key] b')
    expect(maskText(`?key=${encodeURIComponent(value)}`)).toBe('?key=[SECRET:llm.openai.api_key]')
    expect(maskText(JSON.stringify({ k: value }))).toBe('{"k":"[SECRET:llm.openai.api_key]"}')
    expect(maskText(Buffer.from(value).toString('base64'))).toBe('[SECRET:llm.openai.api_key]')
    expect(maskText('provider ollama')).toBe('provider ollama')
    expect(maskCredentials(`mail bob@example.com ${value}`)).toBe('mail bob@example.com [SECRET:llm.openai.api_key]')
    expect(maskValue({ args: [value] }, maskCredentials)).toEqual({ args: ['[SECRET:llm.openai.api_key]'] })
  })

  it('masks a long text the same when asked twice, and by the secrets installed since when they change', () => {
    // A tool's result is masked for messages.jsonl and again for tools.jsonl: the second is the first's answer.
    const text = `${'const x = 1\n'.repeat(200)}token rotated-secret-value mail bob@example.com`
    expect(maskCredentials(text)).toBe(`${'const x = 1\n'.repeat(200)}token rotated-secret-value mail bob@example.com`)
    expect(maskText(text)).toBe(`${'const x = 1\n'.repeat(200)}token rotated-secret-value mail [EMAIL]`)
    installSecrets([{ name: 'github.token', value: 'rotated-secret-value' }])
    expect(maskText(text)).toBe(`${'const x = 1\n'.repeat(200)}token [SECRET:github.token] mail [EMAIL]`)
    expect(maskText(text)).toBe(maskText(`${text}`))
  })

  it('replaces a known token whole even when it holds another secret’s value, and a value whole when it holds a token (the longest match wins)', () => {
    const inner = 'gitlab-secret-inner-value'
    const token = `ghp_${'A'.repeat(10)}${inner.replace(/-/g, '')}${'B'.repeat(10)}`
    installSecrets([{ name: 'gitlab.token', value: inner.replace(/-/g, '') }])
    expect(maskText(`push with ${token} now`)).toBe('push with [GITHUB_TOKEN] now')
    const glpat = `glpat-${'x'.repeat(24)}`
    installSecrets([{ name: 'llm.openai.api_key', value: `prefix-${glpat}-suffix` }])
    expect(maskText(`key prefix-${glpat}-suffix and alone ${glpat}`)).toBe('key [SECRET:llm.openai.api_key] and alone [GITLAB_TOKEN]')
    // Overlapping but neither inside the other: the whole stretch goes, under the longer one's name.
    installSecrets([{ name: 'github.token', value: 'zzzz-overlap-ghp_' }])
    expect(maskText(`x zzzz-overlap-ghp_${'C'.repeat(30)} y`)).toBe('x [GITHUB_TOKEN] y')
    // A value equal to a token's whole text is named by its setting.
    installSecrets([{ name: 'github.token', value: token }])
    expect(maskText(token)).toBe('[SECRET:github.token]')
  })

  it('masks the fleet database URL, its password as written and decoded, from the file and CTXAGENT_DATABASE_URL', () => {
    const config = parseConfig('fleet:\n  database_url: postgres://app:file%40pass-1234@db.example.com/ctx\n')
    const secrets = secretValues(config, { CTXAGENT_DATABASE_URL: 'postgres://app:env-pass-5678@db/ctx?sslmode=require' })
    expect(secrets).toEqual(
      expect.arrayContaining([
        { name: 'fleet.database_url', value: 'postgres://app:file%40pass-1234@db.example.com/ctx' },
        { name: 'fleet.database_url', value: 'file%40pass-1234' },
        { name: 'fleet.database_url', value: 'file@pass-1234' },
        { name: 'fleet.database_url', value: 'env-pass-5678' },
      ]),
    )
    installSecrets(secrets)
    expect(maskText('DATABASE_URL=postgres://app:env-pass-5678@db/ctx?sslmode=require')).toBe('DATABASE_URL=[SECRET:fleet.database_url]')
    expect(maskText(`pw file@pass-1234 ${Buffer.from('env-pass-5678').toString('base64')} ${encodeURIComponent('file@pass-1234')}`)).toBe(
      'pw [SECRET:fleet.database_url] [SECRET:fleet.database_url] [SECRET:fleet.database_url]',
    )
  })

  it('masks fleet.listen_url (the direct connection a worker listens on) and its password, as the database URL', () => {
    const config = parseConfig('fleet:\n  listen_url: postgres://app:listen%2Fpw-4321@db.example.com:5432/ctx\n')
    const secrets = secretValues(config, {})
    expect(secrets).toEqual(
      expect.arrayContaining([
        { name: 'fleet.listen_url', value: 'postgres://app:listen%2Fpw-4321@db.example.com:5432/ctx' },
        { name: 'fleet.listen_url', value: 'listen%2Fpw-4321' },
        { name: 'fleet.listen_url', value: 'listen/pw-4321' },
      ]),
    )
    installSecrets(secrets)
    expect(maskText('LISTEN on postgres://app:listen%2Fpw-4321@db.example.com:5432/ctx failed, pw listen/pw-4321')).toBe(
      'LISTEN on [SECRET:fleet.listen_url] failed, pw [SECRET:fleet.listen_url]',
    )
  })

  it('collects the config keys, MCP env values and the environment’s credentials, and finds user:password in URL keys', () => {
    const config = parseConfig(
      'llm:\n  openai:\n    api_key: cfg-key-123456\nmcp:\n  servers:\n    s:\n      command: x\n      env:\n        TOKEN: mcp-env-value-1\n',
    )
    const names = secretValues(config, { GH_TOKEN: 'gh-env-value-12', HOME: '/root', MY_SERVICE_PASSWORD: 'pw-value-1234' }).map((s) => s.name)
    expect(names).toEqual(['llm.openai.api_key', 'mcp.servers.s.env.TOKEN', 'GH_TOKEN', 'MY_SERVICE_PASSWORD'])
    expect(urlWithCredentials(config)).toBeNull()
    expect(urlWithCredentials(parseConfig('gitlab:\n  url: https://u:p@gitlab.example.com\n'))).toBe('gitlab.url')
  })
})
