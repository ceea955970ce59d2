import { describe, expect, it } from 'vitest'
import { maskText, maskValue } from '../../../src/storage/format/mask.js'

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
  [
    'private key block',
    'key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nend',
    'key:\n[PRIVATE_KEY]\nend',
  ],
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
