"""vLLM-v1-style continuous batching scheduler: one call of :meth:`Scheduler.step` is one forward pass.

The step takes the time as an argument and reads no clock. Per pass it schedules, in order:

1. every running decode request (one token each) within ``max_num_batched_tokens``;
2. running requests still prefilling, a chunk each from what is left of the token budget;
3. waiting requests (preempted ones first, then new ones in arrival order) while the budget lasts and
   fewer than ``max_num_seqs`` are running, unless this pass preempted someone.

When the KV block pool cannot supply a block, the newest running request is preempted: its blocks
are freed and it goes back to the front of the queue, to recompute its prompt and output so far.

Speed: running decode requests form a group that advances together. A member's KV length is
``kv0 + (G - g0)`` for the group's pass counter G, the group keeps running sums of KV and KV squared,
finishing passes sit in a heap, and members are bucketed by ``KV mod block_size`` so that the blocks
needed by a pass are one bucket's count. A typical pass is O(requests that change state), not
O(running requests).
"""

from __future__ import annotations

import heapq
from collections import deque

from planner_core.engine.kv_pool import BlockPool
from planner_core.engine.passes import EnginePass, variance
from planner_core.engine.request import EngineRequest, EngineRole, RequestId, SchedulerConfig
from planner_core.engine.timing import TimingModel, attention_pairs


class _Seq:
    """Mutable per-request scheduler state (internal)."""

    __slots__ = (
        "anon",
        "computed",
        "finish_g",
        "g0",
        "gen0",
        "generated",
        "hashes",
        "held",
        "isl",
        "key",
        "kv0",
        "n_hashable",
        "order",
        "osl",
        "published",
        "remote",
        "rid",
        "target",
    )

    def __init__(self, req: EngineRequest, order: int, hash_tokens: int) -> None:
        self.rid: RequestId = req.request_id
        self.isl = req.prompt_tokens
        self.osl = req.max_output_tokens
        self.hashes = req.hash_ids
        self.n_hashable = min(len(req.hash_ids), req.prompt_tokens // hash_tokens)
        self.order = order
        self.computed = 0
        """Tokens whose KV is in this engine (stale while in the decode group: use kv0 + G - g0)."""
        self.generated = 0
        self.target = req.prompt_tokens
        """Tokens to compute before the next output token: prompt + output so far."""
        self.anon = 0
        self.held: list[int] = []
        self.published = 0
        self.remote = False
        self.kv0 = 0
        self.g0 = 0
        self.gen0 = 0
        self.key = 0
        self.finish_g = -1


class Scheduler:
    """One engine (one data-parallel rank). Feed it requests, call :meth:`step` once per pass."""

    def __init__(self, config: SchedulerConfig, timing: TimingModel) -> None:
        self.config = config
        self.timing = timing
        bs = config.block_size
        self._bs = bs
        self._hash_tokens = config.hash_block_tokens
        self._w = self._hash_tokens // bs
        self._caching = config.enable_prefix_caching
        self._role = config.role
        self.pool = BlockPool(config.num_gpu_blocks, self._w)
        self._order = 0
        self._waiting: deque[_Seq] = deque()
        self._remote: list[tuple[float, int, _Seq]] = []
        self._pre: list[_Seq] = []
        # decode group
        self._dec: dict[RequestId, _Seq] = {}
        self._dec_ids: tuple[RequestId, ...] | None = ()
        self._g = 0
        self._d_s1 = 0
        self._d_s2 = 0
        self._bucket = [0] * bs
        self._fin: list[tuple[int, int, _Seq]] = []
        # queued sums: (count, sum, sum of squares) for new prompts and for preempted / remote-KV
        self._qp = [0, 0, 0]
        self._qd = [0, 0, 0]

    # ---- inputs --------------------------------------------------------------------------------

    def add_request(self, req: EngineRequest) -> None:
        """Queue a request to prefill here (agg or prefill role)."""
        self._check_fits(req)
        seq = self._new_seq(req)
        self._waiting.append(seq)
        self._queue_add(seq, 1)

    def add_remote(self, req: EngineRequest, kv_ready_s: float) -> None:
        """Queue a request prefilled elsewhere whose KV (and first token) arrives at ``kv_ready_s``."""
        self._check_fits(req)
        seq = self._new_seq(req)
        seq.remote = True
        seq.generated = 1
        seq.target = seq.isl + 1
        heapq.heappush(self._remote, (kv_ready_s, seq.order, seq))
        self._queue_add(seq, 1)

    # ---- introspection -------------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._dec) + len(self._pre)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting) + len(self._remote)

    @property
    def has_work(self) -> bool:
        """True when a step now would schedule something (remote KV not yet arrived does not count)."""
        return bool(self._dec or self._pre or self._waiting)

    @property
    def next_remote_ready_s(self) -> float | None:
        return self._remote[0][0] if self._remote else None

    @property
    def kv_usage(self) -> float:
        return self.pool.used / self.pool.num_blocks

    # ---- the pass ------------------------------------------------------------------------------

    def step(self, now_s: float) -> EnginePass:
        cfg = self.config
        bs = self._bs
        pool = self.pool
        remote = self._remote
        while remote and remote[0][0] <= now_s:
            self._waiting.append(heapq.heappop(remote)[2])

        budget = cfg.max_num_batched_tokens
        preempted: list[RequestId] = []
        first: list[RequestId] = []
        finished: list[RequestId] = []

        # 1. running decodes
        dec = self._dec
        n = len(dec)
        extra_decoded: list[RequestId] = []
        if n == 0:
            decoded: tuple[RequestId, ...] = ()
            d_n = d_s1 = d_s2 = 0
        else:
            need = self._bucket[-self._g % bs]
            if n <= budget and pool.alloc(need):
                decoded = self._dec_ids if self._dec_ids is not None else self._freeze_dec_ids()
                s1 = self._d_s1
                self._d_s2 += 2 * s1 + n
                self._d_s1 = s1 + n
                self._g += 1
                budget -= n
                d_n, d_s1, d_s2 = n, self._d_s1, self._d_s2
            else:
                decoded, d_n, d_s1, d_s2, budget = self._decode_slow(budget, preempted)

        # 2. running prefills
        p_n = p_sum = p_s2 = p_kv = 0
        p_pairs = 0.0  # attention pairs, per sequence
        completed: list[_Seq] = []
        if self._pre and budget > 0:
            for seq in list(self._pre):
                if budget == 0:
                    break
                if seq not in self._pre:  # preempted as a victim in this loop
                    continue
                chunk = min(seq.target - seq.computed, budget)
                if not self._alloc_for(seq, seq.computed + chunk, preempted):
                    continue
                p_n += 1
                p_sum += chunk
                p_s2 += chunk * chunk
                p_kv += seq.computed
                p_pairs += attention_pairs(chunk, seq.computed)
                budget -= chunk
                self._advance_prefill(seq, chunk, completed)

        # 3. admissions
        waiting = self._waiting
        if not preempted:
            max_seqs = cfg.max_num_seqs
            while waiting and budget > 0 and len(dec) + len(self._pre) < max_seqs:
                seq = waiting[0]
                if seq.remote:
                    if seq.osl <= 1:  # its only token came from the prefill engine
                        waiting.popleft()
                        self._queue_add(seq, -1)
                        finished.append(seq.rid)
                        continue
                    kv = seq.isl + 1
                    blocks = -(-kv // bs)
                    if not pool.alloc(blocks):
                        break
                    waiting.popleft()
                    self._queue_add(seq, -1)
                    seq.remote = False
                    seq.anon = blocks
                    budget -= 1
                    d_n += 1
                    d_s1 += kv
                    d_s2 += kv * kv
                    extra_decoded.append(seq.rid)
                    seq.generated = 2
                    if seq.generated >= seq.osl:
                        self._free(seq, kv)
                        finished.append(seq.rid)
                    else:
                        self._join(seq, kv, 2)
                    continue
                hits = 0
                if self._caching and seq.computed == 0 and seq.n_hashable:
                    max_hits = min(seq.n_hashable, (seq.target - 1) // self._hash_tokens)
                    hits = pool.match_prefix(seq.hashes, max_hits)
                    if hits:
                        got = seq.hashes[:hits]
                        pool.acquire(got)
                        seq.held.extend(got)
                        seq.published = hits
                        seq.computed = hits * self._hash_tokens
                chunk = min(seq.target - seq.computed, budget)
                blocks = -(-(seq.computed + chunk) // bs) - seq.anon - len(seq.held) * self._w
                if not pool.alloc(blocks):
                    if hits:
                        pool.release(seq.held)
                        seq.held = []
                        seq.published = 0
                        seq.computed = 0
                    break
                seq.anon += blocks
                waiting.popleft()
                self._queue_add(seq, -1)
                self._pre.append(seq)
                p_n += 1
                p_sum += chunk
                p_s2 += chunk * chunk
                p_kv += seq.computed
                p_pairs += attention_pairs(chunk, seq.computed)
                budget -= chunk
                self._advance_prefill(seq, chunk, completed)

        # 4. prompts completed in this pass produce a token
        if completed:
            done = set(map(id, completed))
            self._pre = [s for s in self._pre if id(s) not in done]
            prefill_role = self._role is EngineRole.PREFILL
            for seq in completed:
                (first if seq.generated == 0 else extra_decoded).append(seq.rid)
                seq.generated += 1
                if prefill_role or seq.generated >= seq.osl:
                    self._free(seq, seq.computed)
                    finished.append(seq.rid)
                else:
                    self._join(seq, seq.computed, seq.generated)

        # 5. decodes that reached their output length
        fin = self._fin
        g = self._g
        while fin and fin[0][0] <= g:
            fg, _, seq = heapq.heappop(fin)
            if seq.finish_g != fg:
                continue
            kv, _gen = self._leave(seq)
            self._free(seq, kv)
            finished.append(seq.rid)

        if extra_decoded:
            decoded = decoded + tuple(extra_decoded)
        duration = self.timing.pass_time_s(p_sum, p_kv, d_n, d_s1, p_pairs) if (p_n or d_n) else 0.0
        qp, qd = self._qp, self._qd
        return EnginePass(
            now_s,
            duration,
            p_n,
            p_sum,
            variance(p_n, p_sum, p_s2),
            p_kv,
            d_n,
            d_s1,
            variance(d_n, d_s1, d_s2),
            qp[0],
            qp[1],
            variance(qp[0], qp[1], qp[2]),
            qd[0],
            qd[1],
            variance(qd[0], qd[1], qd[2]),
            tuple(first),
            decoded,
            tuple(finished),
            tuple(preempted),
            pool.used,
            len(dec) + len(self._pre),
        )

    # ---- internals -----------------------------------------------------------------------------

    def _new_seq(self, req: EngineRequest) -> _Seq:
        self._order += 1
        return _Seq(req, self._order, self._hash_tokens)

    def _check_fits(self, req: EngineRequest) -> None:
        if -(-(req.prompt_tokens + 1) // self._bs) > self.config.num_gpu_blocks:
            raise ValueError(
                f"request {req.request_id!r}: prompt of {req.prompt_tokens} tokens cannot fit in "
                f"{self.config.num_gpu_blocks} blocks of {self._bs}"
            )

    def _queue_add(self, seq: _Seq, sign: int) -> None:
        if seq.generated == 0:
            q, v = self._qp, seq.isl
        else:
            q, v = self._qd, seq.isl + seq.generated - 1
        q[0] += sign
        q[1] += sign * v
        q[2] += sign * v * v

    def _freeze_dec_ids(self) -> tuple[RequestId, ...]:
        ids = tuple(self._dec)
        self._dec_ids = ids
        return ids

    def _join(self, seq: _Seq, kv: int, gen: int) -> None:
        g = self._g
        seq.kv0 = kv
        seq.g0 = g
        seq.gen0 = gen
        seq.key = (kv - g) % self._bs
        self._bucket[seq.key] += 1
        self._d_s1 += kv
        self._d_s2 += kv * kv
        seq.finish_g = g + seq.osl - gen
        heapq.heappush(self._fin, (seq.finish_g, seq.order, seq))
        self._dec[seq.rid] = seq
        self._dec_ids = None

    def _leave(self, seq: _Seq) -> tuple[int, int]:
        """Take ``seq`` out of the decode group; returns its (KV tokens, generated tokens)."""
        d = self._g - seq.g0
        kv, gen = seq.kv0 + d, seq.gen0 + d
        self._bucket[seq.key] -= 1
        self._d_s1 -= kv
        self._d_s2 -= kv * kv
        seq.finish_g = -1
        del self._dec[seq.rid]
        self._dec_ids = None
        return kv, gen

    def _free(self, seq: _Seq, kv_tokens: int) -> None:
        """Return a request's blocks; ``kv_tokens`` is its KV length (anonymous blocks are the rest)."""
        blocks = -(-kv_tokens // self._bs)
        self.pool.release_anon(blocks - len(seq.held) * self._w)
        if seq.held:
            self.pool.release(seq.held)
        seq.held = []
        seq.anon = 0
        seq.published = 0
        seq.computed = 0

    def _advance_prefill(self, seq: _Seq, chunk: int, completed: list[_Seq]) -> None:
        seq.computed += chunk
        if self._caching and seq.published < seq.n_hashable:
            stop = min(seq.n_hashable, seq.computed // self._hash_tokens)
            if stop > seq.published:
                got = self.pool.publish_many(seq.hashes[seq.published : stop])
                seq.held.extend(got)
                seq.anon -= len(got) * self._w
                seq.published = stop
        if seq.computed >= seq.target:
            completed.append(seq)

    def _newest_running(self) -> _Seq:
        if self._pre:
            return self._pre[-1]
        return self._dec[next(reversed(self._dec))]

    def _preempt(self, seq: _Seq, preempted: list[RequestId]) -> None:
        if seq.rid in self._dec and self._dec[seq.rid] is seq:
            kv, gen = self._leave(seq)
            self._free(seq, kv)
            seq.generated = gen
        else:
            self._pre.remove(seq)
            self._free(seq, seq.computed)
        seq.target = seq.isl + seq.generated
        self._waiting.appendleft(seq)
        self._queue_add(seq, 1)
        preempted.append(seq.rid)

    def _alloc_for(self, seq: _Seq, tokens: int, preempted: list[RequestId]) -> bool:
        """Grow a prefilling request to hold ``tokens``, preempting the newest running requests when the
        pool is short. False if ``seq`` itself had to be preempted."""
        need = -(-tokens // self._bs) - seq.anon - len(seq.held) * self._w
        while not self.pool.alloc(need):
            victim = self._newest_running()
            self._preempt(victim, preempted)
            if victim is seq:
                return False
        seq.anon += need
        return True

    def _decode_slow(
        self, budget: int, preempted: list[RequestId]
    ) -> tuple[tuple[RequestId, ...], int, int, int, int]:
        """Decode pass when the token budget or the block pool is short: request by request."""
        bs, pool, dec = self._bs, self.pool, self._dec
        g = self._g
        scheduled: list[_Seq] = []
        skipped: list[_Seq] = []
        for seq in list(dec.values()):
            if dec.get(seq.rid) is not seq:
                continue
            if budget == 0:
                skipped.append(seq)
                continue
            kv = seq.kv0 + g - seq.g0
            if kv % bs == 0:
                while not pool.alloc(1):
                    victim = self._newest_running()
                    self._preempt(victim, preempted)
                    if victim is seq:
                        break
                if dec.get(seq.rid) is not seq:
                    continue
            scheduled.append(seq)
            budget -= 1
        # everyone still in the group advances; the skipped ones are then moved back by one pass
        n = len(dec)
        self._d_s2 += 2 * self._d_s1 + n
        self._d_s1 += n
        self._g = g + 1
        for seq in skipped:
            if dec.get(seq.rid) is not seq:
                continue
            kv = seq.kv0 + g - seq.g0
            self._d_s1 -= 1
            self._d_s2 -= 2 * kv + 1
            self._bucket[seq.key] -= 1
            seq.g0 += 1
            seq.key = (seq.kv0 - seq.g0) % bs
            self._bucket[seq.key] += 1
            seq.finish_g += 1
            heapq.heappush(self._fin, (seq.finish_g, seq.order, seq))
        d_n = d_s1 = d_s2 = 0
        ids: list[RequestId] = []
        for seq in scheduled:
            if dec.get(seq.rid) is not seq:
                continue
            kv = seq.kv0 + self._g - seq.g0
            d_n += 1
            d_s1 += kv
            d_s2 += kv * kv
            ids.append(seq.rid)
        return tuple(ids), d_n, d_s1, d_s2, budget

    def check_invariants(self) -> None:
        """Recompute the incremental bookkeeping from scratch (O(running); for tests). Raises
        AssertionError on a mismatch."""
        bs, w = self._bs, self._w
        anon = 0
        s1 = s2 = 0
        bucket = [0] * bs
        for seq in self._dec.values():
            kv = seq.kv0 + self._g - seq.g0
            s1 += kv
            s2 += kv * kv
            bucket[seq.key] += 1
            assert (seq.kv0 - seq.g0) % bs == seq.key, "bucket key"
            assert seq.gen0 + self._g - seq.g0 < seq.osl, "decode member past its output length"
            anon += -(-kv // bs) - len(seq.held) * w
        for seq in self._pre:
            assert seq.anon + len(seq.held) * w == -(-seq.computed // bs), "prefill blocks"
            anon += seq.anon
        assert (s1, s2) == (self._d_s1, self._d_s2), "decode sums"
        assert bucket == self._bucket, "decode buckets"
        referenced = sum(1 for rc in self.pool._refs.values() if rc > 0)
        assert self.pool.used == anon + referenced * w, (
            f"blocks used {self.pool.used} != {anon} + {referenced}*{w}"
        )
        qp = [0, 0, 0]
        qd = [0, 0, 0]
        for seq in [*self._waiting, *(e[2] for e in self._remote)]:
            q, v = (qp, seq.isl) if seq.generated == 0 else (qd, seq.isl + seq.generated - 1)
            q[0] += 1
            q[1] += v
            q[2] += v * v
        assert (qp, qd) == (self._qp, self._qd), "queue sums"
