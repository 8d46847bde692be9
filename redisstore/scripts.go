package redisstore

import "github.com/redis/go-redis/v9"

// The scripts write a record and its shard's indexes in one atomic step.
// A record is a hash: b holds its bytes (backend.EncodeRecord), and v, t
// and s the small fields a script checks without decoding them: a version
// drawn from the shard's counter on every write (so a version never comes
// back, even after the key expired and was claimed again), the token and
// the state. The Backend computes a record in Go, and has a script write
// it only if v is still the version it knows: a compare-and-set. Lua
// cannot write the shared record encoding, which is why the logic is in Go
// and the scripts only check, draw tokens and write.
//
// The scripts use what Redis 7 and Valkey both accept: effects
// replication (the default since Redis 7), INFO and TIME inside a script,
// and no function library.

// drawToken is the Lua that draws a fencing token from the shard's token
// hash (KEYS[5]): fields id (the server's replication id when the epoch
// began), e (the epoch, milliseconds of the server's clock since
// 2025-01-01 UTC) and n (the tokens drawn in it). A token is
// (e*256+n)*16 + the shard (ARGV[7]), so two shards never draw the same
// one. A new epoch, at least one past the last and never behind the
// clock, begins when the server serving the script is not the one that
// began the current epoch (a replica promoted by a failover, a restart),
// or after 255 tokens. So a primary never draws a token that another
// primary drew, even one whose increments it never received, as long as
// the servers' clocks differ by less than a failover takes. A token stays
// below 2^53 until 2094, exact in Lua's numbers and in JSON.
//
// The server is told apart by its replication id (master_replid) alone:
// a primary draws a new one when it starts (one it loads from its RDB
// file becomes its secondary id) and when it is promoted, and a replica,
// which cannot run the script's writes, shares its primary's. INFO's
// replication section costs the server about 2 µs a claim; the server
// section, for the run id, cost 8 (docs/scale.md).
const drawToken = `
local function draw(tk, shard)
  local info = redis.call('INFO', 'replication')
  local at = string.find(info, 'master_replid:', 1, true)
  -- Without a replication id to compare, every token begins an epoch.
  local id = at and string.sub(info, at + 14, at + 53)
  local f = redis.call('HMGET', tk, 'id', 'e', 'n')
  local e, n = tonumber(f[2]) or 0, tonumber(f[3]) or 0
  if not id or f[1] ~= id or n >= 255 then
    local now = redis.call('TIME')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - 1735689600000
    e, n = math.max(e + 1, ms), 1
    redis.call('HSET', tk, 'id', id or '', 'e', string.format('%.0f', e), 'n', n)
  else
    n = n + 1
    redis.call('HSET', tk, 'n', n)
  end
  return string.format('%.0f', (e * 256 + n) * 16 + tonumber(shard))
end
`

// claimScript writes a new claim and draws its token, in one round trip.
//
// KEYS: record, stale index, expiry index, version counter, token hash.
// ARGV: [1] the version the claim replaces ("0": no record), [2] the
// claim's bytes, encoded with token 0 (the token is field t: decodeStored
// puts it in), [3] its score in the stale index, [4] its member in the
// indexes, [5] the claiming call's nonce, [6] "1" to keep the count
// fields (a released record's claim), "0" to drop them (a new life),
// [7] the record's shard.
//
// It returns {1, new version, token} when written, and {0, v, b, t, c,
// rp, cf, mm, lr, lj} (the record as it is, with the nonce of the call
// that wrote its claim) when the version is not ARGV[1].
var claimScript = redis.NewScript(drawToken + `
local f = redis.call('HMGET', KEYS[1], 'v', 'b', 't', 'c', 'rp', 'cf', 'mm', 'lr', 'lj')
local v = f[1] or '0'
if v ~= ARGV[1] then return {0, v, f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]} end
local tok = draw(KEYS[5], ARGV[7])
local nv = redis.call('INCR', KEYS[4])
if v ~= '0' and ARGV[6] ~= '1' then redis.call('HDEL', KEYS[1], 'rp', 'cf', 'mm', 'lr', 'lj') end
redis.call('HSET', KEYS[1], 'b', ARGV[2], 'v', nv, 't', tok, 's', '1', 'c', ARGV[5])
-- Over a released or expired record its TTL goes (a new key has none);
-- an expiry entry may outlive the record the server expired.
if v ~= '0' then redis.call('PERSIST', KEYS[1]) end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZREM', KEYS[3], ARGV[4])
return {1, nv, tok}
`)

// tallyScript adds counts to records' count fields, which a read adds to
// the counts a record's bytes hold; they expire with the record's key.
// One call serves any number of records of one shard (one Cluster slot),
// so that a batch costs the server one script call a shard.
//
// KEYS: the records. ARGV: six for each record, in KEYS' order: the
// token of the done record the counts were taken on ("0": any record),
// replays, conflicts, mismatches, the last replay's time and the last
// rejection's, in Unix nanoseconds ("0": none; a later time replaces an
// earlier one).
//
// It returns how many records it added counts to; a record that is gone,
// or is another claim's, gets none.
var tallyScript = redis.NewScript(`
local added = 0
local function later(k, f, at)
  if at == '0' then return end
  local cur = redis.call('HGET', k, f)
  if not cur or #at > #cur or (#at == #cur and at > cur) then redis.call('HSET', k, f, at) end
end
for i, k in ipairs(KEYS) do
  local a = (i - 1) * 6
  local t = redis.call('HGET', k, 't')
  if t and (ARGV[a + 1] == '0' or t == ARGV[a + 1]) then
    if ARGV[a + 2] ~= '0' then redis.call('HINCRBY', k, 'rp', ARGV[a + 2]) end
    if ARGV[a + 3] ~= '0' then redis.call('HINCRBY', k, 'cf', ARGV[a + 3]) end
    if ARGV[a + 4] ~= '0' then redis.call('HINCRBY', k, 'mm', ARGV[a + 4]) end
    later(k, 'lr', ARGV[a + 5])
    later(k, 'lj', ARGV[a + 6])
    added = added + 1
  end
end
return added
`)

// putScript writes a record.
//
// KEYS: record, stale index, expiry index, version counter.
// ARGV: [1] the version read ("0": no record), [2] the token the write is
// fenced by ("0": none), [3] the record's bytes, [4] its token, [5] its
// state, [6] its score in the stale index ("-": not in it), [7] its score
// in the expiry index ("-": not in it), [8] its member in the indexes,
// [9] its TTL in milliseconds ("0": none, "k": keep the key's TTL).
//
// It returns {1, new version} when written, {0} when the version changed,
// and {-1} when the record is not in progress with the fencing token.
var putScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'v', 't', 's')
local v = f[1] or '0'
if ARGV[2] ~= '0' and (f[2] ~= ARGV[2] or f[3] ~= '1') then return {-1} end
if v ~= ARGV[1] then return {0} end
local nv = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'b', ARGV[3], 'v', nv, 't', ARGV[4], 's', ARGV[5])
if ARGV[9] == '0' then
  redis.call('PERSIST', KEYS[1])
elseif ARGV[9] ~= 'k' then
  redis.call('PEXPIRE', KEYS[1], ARGV[9])
end
if ARGV[6] == '-' then
  redis.call('ZREM', KEYS[2], ARGV[8])
else
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[8])
end
if ARGV[7] == '-' then
  redis.call('ZREM', KEYS[3], ARGV[8])
else
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[8])
end
return {1, nv}
`)

// delScript deletes a record reclaimed at its expiry.
//
// KEYS: record, stale index, expiry index. ARGV: [1] the version read
// ("0": the record is gone: only its index entries go), [2] its member.
//
// It returns 1 when it deleted the record, 0 otherwise.
var delScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], 'v') or '0'
if v ~= ARGV[1] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
if v == '0' then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)
