package redisstore

import "github.com/redis/go-redis/v9"

// The scripts write a record and its shard's indexes in one atomic step.
// A record is a hash: b holds its bytes (backend.EncodeRecord), and v, t
// and s the small fields a script checks without decoding them: a version
// drawn from the shard's counter on every write (so a version never comes
// back, even after the key expired and was claimed again), the token and
// the state. The Backend reads a record, computes the new one in Go, and
// has a script write it only if v is still what it read: a compare-and-set.
// Lua cannot read the shared record encoding, which is why the logic is in
// Go and the scripts only check and write.

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
local v = redis.call('HGET', KEYS[1], 'v') or '0'
if ARGV[2] ~= '0' then
  local f = redis.call('HMGET', KEYS[1], 't', 's')
  if f[1] ~= ARGV[2] or f[2] ~= '1' then return {-1} end
end
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
