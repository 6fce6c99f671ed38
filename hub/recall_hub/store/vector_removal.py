"""Removing elements from a Redis vector set without meeting Redis 8.2's ``VREM`` crash.

Redis 8.2's HNSW (redis/redis#15424; fixed upstream by #15547, in no release the test stack's wheel carries) can
leave a set's top level (``max-level`` in ``VINFO``) below the level of one of its nodes: when it deletes the entry
point and the entry point has no links on its own top layers, the replacement comes from a lower layer while a
taller node, not linked to it there, remains. A later ``VREM`` of such a taller node relinks its neighbours on a
layer above the set's top level, searching from an entry point that has no such layer: it reads past the end of a
node and can kill the server. Small sets under adds and removes reach that state most easily; the test stack met
it once in a fresh-clone run.

Every removal of the hub goes through :data:`REMOVE_SCRIPT`, atomically in Redis. Before each ``VREM`` it compares
the element's level (the layers ``VLINKS`` lists) with the set's top level; only when the element stands taller
does it first *lift* the set: it adds a temporary element (the removed element's own vector, a name no bead has)
until one is drawn at the element's level or higher — a new node taller than the set's top becomes its entry point
and the top level rises with it — then removes the element, then the temporary one (the entry point, whose
removal is safe: its replacement is taken from its highest linked layer). A temporary element drawn too short is
removed at once (never taller than the top). Each draw reaches a level ``l`` with probability ``4^-l``, so a lift
costs about ``4^l`` small inserts: a few for the short nodes small sets have.

What this cannot cover: a replica, or Redis replaying its append-only file after a restart, runs the same
``VREM`` on a graph whose levels were drawn again; there the state is as rare as on the primary, and only a Redis
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

REMOVE_SCRIPT = f"""
local key = KEYS[1]
local margin = tonumber(ARGV[1])
local removed, draws = 0, 0

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

for i = 2, #ARGV do
  local name = ARGV[i]
  local own = level(name)
  if own ~= nil then
    local wanted = own + margin
    local lifted = wanted > info('max-level')
    if lifted then
      local failed = lift(name, wanted)
      if failed then return failed end
    end
    removed = removed + redis.call('VREM', key, name)
    if lifted then redis.call('VREM', key, {_LIFT_LUA}) end
  end
end
return {{removed, draws}}
"""
"""``EVAL REMOVE_SCRIPT 1 <set> <margin> <name>...``: removes each name the set holds, lifting the set first where
the name stands above its top level (``margin`` 0; a test passes 1 to lift before every removal). Replies
``[removed, draws]``: how many names were removed and how many temporary elements were drawn."""


def queue_removal(pipe: Any, key: str, names: list[str], margin: int = 0) -> None:
    """Queue on ``pipe`` (a redis-py pipeline, in a transaction or not) the removal of ``names`` from the vector
    set ``key``."""
    pipe.eval(REMOVE_SCRIPT, 1, key, margin, *names)


def note_lifts(replies: Iterable[Any]) -> None:
    """Log the lifts among a pipeline's replies (those of :data:`REMOVE_SCRIPT` are its only two-item lists): each
    means a set had met the state Redis 8.2 can crash on."""
    draws = sum(int(reply[1]) for reply in replies if isinstance(reply, list) and len(reply) == 2)
    if draws:
        log.info("a vector set's top level stood below an element being removed: lifted it first (%d draws)", draws)
