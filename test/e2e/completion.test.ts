import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { cli, ROOT } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-completion-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** What the bash completion offers for a command line (the cursor at its end), with this project's bin/ctxagent on PATH. */
function complete(script: string, words: string[]): string[] {
  const dir = scratch()
  writeFileSync(join(dir, 'c.bash'), script)
  const env = { ...process.env, PATH: `${join(ROOT, 'bin')}:${process.env.PATH ?? ''}`, CTXAGENT_HOME: '', CTXAGENT_CONFIG: '' }
  const res = spawnSync(
    'bash',
    [
      '-c',
      `source ${join(dir, 'c.bash')}; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _ctxagent; printf '%s\\n' "\${COMPREPLY[@]}"`,
    ],
    { encoding: 'utf8', env },
  )
  return res.stdout.split('\n').filter(Boolean)
}

describe('ctxagent completion', () => {
  it('prints a bash script that bash -n accepts and that completes commands, options and choices', async () => {
    const res = await cliIn(['completion', 'bash'])
    expect(res.code, res.stderr).toBe(0)
    const dir = scratch()
    writeFileSync(join(dir, 'c.bash'), res.stdout)
    const check = spawnSync('bash', ['-n', join(dir, 'c.bash')], { encoding: 'utf8' })
    expect(check.status, check.stderr).toBe(0)
    expect(complete(res.stdout, ['ctxagent', 'vi'])).toEqual(['view'])
    expect(complete(res.stdout, ['ctxagent', '--home', 'x', 'li'])).toEqual(['list'])
    expect(complete(res.stdout, ['ctxagent', 'run', '--max-t'])).toEqual(['--max-turns', '--max-tokens'])
    expect(complete(res.stdout, ['ctxagent', 'run', '--provider', ''])).toEqual(['openai', 'anthropic', 'ollama', 'replay'])
    expect(complete(res.stdout, ['ctxagent', 'ls', '--sea'])).toEqual(['--search'])
  })

  it('completes task uuids from the tree named on the command line, and offers no internal flag', async () => {
    const home = scratch()
    const demo = cli(['demo', '--home', home, '--json'])
    expect(demo.code, demo.stderr).toBe(0)
    const uuid = (JSON.parse((await cliIn(['list', '--json', '--home', home])).stdout.split('\n')[0] ?? '{}') as { uuid: string }).uuid
    const script = (await cliIn(['completion', 'bash'])).stdout
    expect(complete(script, ['ctxagent', '--home', home, 'view', uuid.slice(0, 4)])).toEqual([uuid])
    expect(complete(script, ['ctxagent', '--home', home, 'run', '--resume', ''])).toEqual(['last', uuid])
    expect(complete(script, ['ctxagent', '--home', home, 'view', 'la'])).toEqual(['last'])
    expect(complete(script, ['ctxagent', 'jobs', ''])).toEqual(expect.arrayContaining(['show', 'cancel', 'retry']))
    expect(complete(script, ['ctxagent', 'jobs', 'ca'])).toEqual(['cancel'])
    expect(complete(script, ['ctxagent', '--home', home, 'list', uuid.slice(0, 4)])).toEqual([])
    for (const shell of ['bash', 'zsh', 'fish']) {
      const text = (await cliIn(['completion', shell])).stdout
      for (const internal of ['--warm-child', '--no-prestart']) expect(text, `${shell}: ${internal}`).not.toContain(internal)
    }
    expect(complete(script, ['ctxagent', 'run', '--uu'])).toEqual([])
  })

  it('prints zsh and fish scripts naming every command, and refuses another shell (exit 2)', async () => {
    for (const shell of ['zsh', 'fish']) {
      const res = await cliIn(['completion', shell])
      expect(res.code, res.stderr).toBe(0)
      for (const command of ['run', 'view', 'list', 'stats', 'cleanup', 'watch-locks', 'doctor', 'export'])
        expect(res.stdout, `${shell}: ${command}`).toContain(command)
    }
    expect((await cliIn(['completion', 'zsh'])).stdout).toMatch(/^#compdef ctxagent\n/)
    expect((await cliIn(['completion', 'tcsh'])).code).toBe(2)
  })

  it('needs no config: a broken one does not stop it', async () => {
    const dir = scratch()
    writeFileSync(join(dir, 'ctxagent.yaml'), 'locks: [1\n')
    expect((await cliIn(['completion', 'bash', '--config', 'ctxagent.yaml'], {}, dir)).code).toBe(0)
  })
})
