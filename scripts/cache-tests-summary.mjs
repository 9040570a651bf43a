// Summarizes a run of the public HTTP cache test suite (http-cache-tests, installed by
// scripts/cache-tests): the results its client printed, counted by the kind of each test and by
// result, then the required tests that did not pass, each with the suite's message, and a last
// line for machines:
//
//   node scripts/cache-tests-summary.mjs PACKAGE_DIR RESULTS.json
//   ...
//   required passed: N of M
//
// The kinds are the suite's: `required` (what RFC 9111 demands of a shared cache), `optimal` (what
// a good cache does) and `check` (a behaviour noted, neither good nor bad). M counts the required
// tests that the client runs against a proxy: those marked `browser_only` are never run there, and
// are counted apart. The client also runs the Surrogate-Control tests (`surrogate-control.mjs`),
// shown as a suite of their own. A result is `true` (passed) or `[name, message]`: `Assertion`
// (the cache did the wrong thing), `Setup` (a request the test needed went wrong, say a 502 where
// the origin answered a 200), or the name of an error the client met.
//
// Exits 1 when the results name none of the suite's tests (the client failed before any ran).
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const [dir, resultsPath] = process.argv.slice(2)
if (!dir || !resultsPath) {
  console.error('usage: node cache-tests-summary.mjs PACKAGE_DIR RESULTS.json')
  process.exit(2)
}
const load = async (file) => (await import(pathToFileURL(path.join(dir, 'tests', file)).href)).default
const suites = [...await load('index.mjs'), await load('surrogate-control.mjs')]
const version = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version

let results
try {
  results = JSON.parse(fs.readFileSync(resultsPath, 'utf8'))
} catch (err) {
  console.error(`${resultsPath}: not the client's JSON results: ${err.message}`)
  process.exit(1)
}

// What one result is, in a word.
function outcome (test) {
  const r = results[test.id]
  if (test.browser_only) return 'browser-only'
  if (r === undefined) return 'not run'
  if (r === true) return 'passed'
  if (Array.isArray(r) && r[0] === 'Assertion') return 'failed'
  if (Array.isArray(r) && r[0] === 'Setup') return 'setup failed'
  return 'error'
}

const columns = ['passed', 'failed', 'setup failed', 'error', 'not run', 'browser-only']
const rows = new Map() // "kind" or "kind (suite)" -> {column: count}
const notPassed = []
let known = 0
for (const suite of suites) {
  const surrogate = suite.id === 'surrogate-control'
  for (const test of suite.tests) {
    const kind = test.kind || 'required'
    const row = surrogate ? `${kind} (Surrogate-Control)` : kind
    const result = outcome(test)
    if (!rows.has(row)) rows.set(row, Object.fromEntries(columns.map(c => [c, 0])))
    rows.get(row)[result]++
    if (results[test.id] !== undefined) known++
    if (!surrogate && kind === 'required' && result !== 'passed' && result !== 'browser-only') {
      const r = results[test.id]
      const why = Array.isArray(r) ? `[${r[0]}] ${r[1]}` : 'not run'
      notPassed.push(`  ${test.id}: ${why}`)
    }
  }
}

const order = ['required', 'optimal', 'check']
const names = [...rows.keys()].sort((a, b) => {
  const rank = (k) => order.indexOf(k.split(' ')[0]) + (k.includes('(') ? order.length : 0)
  return rank(a) - rank(b)
})
const width = Math.max(...names.map(n => n.length), 'kind'.length)
console.log(`http-cache-tests ${version}: ${known} results`)
console.log(['kind'.padEnd(width), ...columns.map(c => c.padStart(c.length))].join('  '))
for (const name of names) {
  const row = rows.get(name)
  console.log([name.padEnd(width), ...columns.map(c => String(row[c]).padStart(c.length))].join('  '))
}
const required = rows.get('required')
const applicable = columns.filter(c => c !== 'browser-only').reduce((sum, c) => sum + required[c], 0)
console.log(`\nrequired tests not passed (${notPassed.length}):`)
console.log(notPassed.length ? notPassed.join('\n') : '  none')
if (known === 0) {
  console.error(`${resultsPath} names none of the suite's tests`)
  process.exit(1)
}
console.log(`\nrequired passed: ${required.passed} of ${applicable}`)
