"""Removing elements from a Redis vector set without meeting Redis 8.2's ``VREM`` crash.

Redis 8.2's HNSW (redis/redis#15424; fixed upstream by #15547, in no release the test stack's wheel carries) can
leave a set's top level (``max-level`` in ``VINFO``) below the level of one of its nodes: when it deletes the entry
point and the entry point has no links on its own top layers, the replacement comes from a lower layer while a
taller node, not linked to it there, remains. A later ``VREM`` of such a taller node relinks its neighbours on a
layer above the set's top level, searching from an entry point that has no such layer: it reads past the end of a
node and can kill the server. Small sets under adds and removes reach that state most easily; the test stack met
it once in a fresh-clone run.

Every removal of the hub goes through :data:`REMOVE_SCRIPT`, atomically in Redis. Before each ``VREM`` it compares
the element's level (the layers ``VLINKS`` lists) with the set's top level, and where the element stands taller it
first mends the set, one of two ways:

- A small set (:data:`SMALL_SET` vectors or fewer) is *reloaded*: ``DUMP`` and ``RESTORE … REPLACE``. Loading a set
  makes its tallest node the entry point, with every node's level and links as they were. Before its first removal
  the script reloads a small set in any case, and the ``RESTORE`` is what a replica and the append-only file
  receive: their copy of the set, whose levels were drawn again as they replayed its adds, becomes the primary's
  node for node, so the removals that follow — deterministic on the same graph — are as safe there as here. A
  Redis restart replaying its file, or a replica, never removes from a small set it drew itself.
- A larger set is *lifted* (copying it for every removal would cost too much): the script adds a temporary element
  (the removed element's own vector, a name no bead has) until one is drawn at the element's level or higher — a
  new node taller than the set's top becomes its entry point and the top level rises with it — then removes the
  element, then the temporary one (the entry point, whose removal is safe: its replacement is taken from its
  highest linked layer). A temporary element drawn too short is removed at once (never taller than the top). Each
  draw reaches a level ``l`` with probability ``4^-l``, so a lift costs about ``4^l`` small inserts.

What this cannot cover: a replica, or Redis replaying its append-only file after a restart, runs a larger set's
removals on a graph whose levels were drawn again; there the state is as rare as on the primary, and only a Redis
with the upstream fix removes it (docs/operations.md, "Redis's vector sets and deletes").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

LIFT_NAME = "\x00lift"
"""The temporary element's name: bead ids and their vectors' names never start with a NUL."""
_LIFT_LUA = "'\\0lift'"

LIFT_EF = 16
"""How widely the temporary element looks for neighbours as it is added: it is gone before the script ends."""

MAX_LIFT_DRAWS = 200_000
"""A lift gives up (an error reply; the names before it are removed, the rest not) after this many draws: a node
at level 9 or higher, which a set of a few hundred thousand vectors is unlikely to hold. The write is retried like
any other failed one."""

SMALL_SET = 64
"""Sets of this many vectors or fewer are reloaded, not lifted. The ``RESTORE`` a replica and the append-only file
receive holds the whole set (~0.5 KB a 384-dimension vector with its links and attributes: ~33 KB at 64), once a
removal call, and the reload costs the primary ~0.5 ms at 64 (a removal from a 60-vector set: 0.74 ms p50 against
a bare ``VREM``'s 0.22; at 128, 1.35 against 0.25). Sets this small are where the state was met on the test
machine."""

REMOVE_SCRIPT = f"""
local key = KEYS[1]
local margin, small = tonumber(ARGV[1]), tonumber(ARGV[2])
local removed, draws, reloads = 0, 0, 0

-- VINFO's names and words are status replies: Lua sees each as a table holding it as 'ok'
local function text(value)
  if type(value) == 'table' then return value.ok end
  return value
end

local function info(name)
  local reply = redis.call('VINFO', key)
  for i = 1, #reply, 2 do
    if text(reply[i]) == name then return text(reply[i + 1]) end
  end
end

local function level(name)
  local links = redis.call('VLINKS', key, name)
  if not links then return nil end
  return #links - 1
end

local function reload()
  redis.call('RESTORE', key, 0, redis.call('DUMP', key), 'REPLACE')
  reloads = reloads + 1
end

local quantization = {{int8 = 'Q8', bin = 'BIN', f32 = 'NOQUANT'}}

local function lift(name, wanted)
  local add = {{'VADD', key, 'VALUES'}}
  local vector = redis.call('VEMB', key, name)
  add[#add + 1] = #vector
  for _, x in ipairs(vector) do add[#add + 1] = x end
  for _, x in ipairs({{{_LIFT_LUA}, quantization[info('quant-type')], 'EF', {LIFT_EF}}}) do add[#add + 1] = x end
  while true do
    draws = draws + 1
    if draws > {MAX_LIFT_DRAWS} then
      return redis.error_reply('vector set ' .. key .. ': no node drawn at level ' .. wanted)
    end
    redis.call(unpack(add))
    if level({_LIFT_LUA}) >= wanted then return nil end
    redis.call('VREM', key, {_LIFT_LUA})
  end
end

local card = redis.call('VCARD', key)
local reloading = card > 0 and card <= small
for i = 3, #ARGV do
  local name = ARGV[i]
  local own = level(name)
  if own ~= nil then
    if reloading and reloads == 0 then reload() end  -- a reload keeps every node's level
    local wanted = own + margin
    local lifted = false
    if wanted > info('max-level') then
      if reloading then
        reload()
      else
        local failed = lift(name, wanted)
        if failed then return failed end
        lifted = true
      end
    end
    removed = removed + redis.call('VREM', key, name)
    if lifted then redis.call('VREM', key, {_LIFT_LUA}) end
  end
end
return {{removed, draws, reloads}}
"""
"""``EVAL REMOVE_SCRIPT 1 <set> <margin> <small> <name>...``: removes each name the set holds, mending the set
first where the name stands above its top level — reloading it if it holds ``small`` vectors or fewer (reloaded
before its first removal in any case), else lifting it. ``margin`` is 0; a test passes 1 to mend before
removing any element at the top. Replies ``[removed, draws, reloads]``: how many names were removed, how many
temporary elements were drawn, how many times the set was reloaded."""


def queue_removal(pipe: Any, key: str, names: list[str], margin: int = 0, small: int = SMALL_SET) -> None:
    """Queue on ``pipe`` (a redis-py pipeline, in a transaction or not) the removal of ``names`` from the vector
    set ``key``."""
    pipe.eval(REMOVE_SCRIPT, 1, key, margin, small, *names)


def log_mending(replies: Iterable[Any]) -> None:
    """Log the mending among a pipeline's replies (those of :data:`REMOVE_SCRIPT` are its only three-item lists):
    a lift, or a small set reloaded more than once, means a set had met the state Redis 8.2 can crash on."""
    answers = [reply for reply in replies if isinstance(reply, list) and len(reply) == 3]
    draws = sum(int(reply[1]) for reply in answers)
    mended = sum(max(int(reply[2]) - 1, 0) for reply in answers)
    if draws or mended:
        log.info("a vector set's top level stood below an element being removed: mended it first "
                 "(%d draws of a lift, %d reloads)", draws, mended)
