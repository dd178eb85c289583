"""Keyed process functions with keyed state (Flink's KeyedProcessFunction with
ValueState, ListState and MapState), on `KeyedStream.process(fn)`.

For each batch that reaches a subtask, its rows are grouped by key (in order of first
appearance) and `fn(key, rows, state)` is called once per key: `key` is the tuple of the
key columns' values, `rows` a RecordBatch of that key's rows of the batch (in their
order), `state` the key's state. It returns what goes on: a RecordBatch or Table, an
iterable of them, or None. `fn` is a plain function or a KeyedProcessFunction, which
may also override `open(context)` and `finish(key, state)` (called at the end of a bounded
input, once per key that has state, e.g. to emit what it held back).

State is named and bound to the current key:

    total = state.value("total", default=0)    # ValueState: .value(), .update(v), .clear()
    seen = state.list("seen")                   # ListState: .get(), .add(v), .add_all(vs),
                                                #   .update(vs), .clear()
    last = state.map("last_by_day")             # MapState: [k], .get(k, d), [k] = v,
                                                #   `in`, del, .items(), .keys(), .values(),
                                                #   len(), .clear()

Values are any picklable Python objects, and a stored list or dict is the state's own:
change it only through the state. A name is one kind of state (ValueError otherwise).
The state is the operator's checkpointed state, one table per name: the key columns
(their types as in the input) and each key's pickled value; it is shared out by key
group when the job resumes at another parallelism (flinkyarn/key_groups.py).
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from flinkyarn import key_groups
from flinkyarn.key_groups import Redistribution
from flinkyarn.pipeline.operator import Operator, OperatorContext

_VALUE, _LIST, _MAP = "value", "list", "map"
Key = tuple[Any, ...]  # the values of the key columns
_PAYLOAD = "__state"
_KIND = b"flinkyarn.state.kind"


class KeyedProcessFunction:
    """Base of a keyed process function with hooks; see the module docstring."""

    def open(self, context: OperatorContext) -> None:
        """Before the first row; `context` is the operator's."""

    def process(self, key: Key, rows: pa.RecordBatch, state: "KeyedState") -> Any:
        raise NotImplementedError

    def finish(self, key: Key, state: "KeyedState") -> Any:
        """The bounded input ended: called for each key with state; returns as process."""
        return None


class ValueState:
    def __init__(self, store: dict[Key, Any], key: Key, default: Any) -> None:
        self._store, self._key, self._default = store, key, default

    def value(self) -> Any:
        return self._store.get(self._key, self._default)

    def update(self, value: Any) -> None:
        self._store[self._key] = value

    def clear(self) -> None:
        self._store.pop(self._key, None)


class ListState:
    def __init__(self, store: dict[Key, list[Any]], key: Key) -> None:
        self._store, self._key = store, key

    def get(self) -> list[Any]:
        """The list (a copy: add to it through the state)."""
        return list(self._store.get(self._key, ()))

    def add(self, value: Any) -> None:
        self._store.setdefault(self._key, []).append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self._store.setdefault(self._key, []).extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self._store[self._key] = list(values)

    def clear(self) -> None:
        self._store.pop(self._key, None)


class MapState:
    def __init__(self, store: dict[Key, dict[Any, Any]], key: Key) -> None:
        self._store, self._key = store, key

    def _map(self) -> dict[Any, Any]:
        return self._store.get(self._key, {})

    def __getitem__(self, name: Any) -> Any:
        return self._map()[name]

    def get(self, name: Any, default: Any = None) -> Any:
        return self._map().get(name, default)

    def __setitem__(self, name: Any, value: Any) -> None:
        self._store.setdefault(self._key, {})[name] = value

    def __delitem__(self, name: Any) -> None:
        mapping = self._store.get(self._key, {})
        del mapping[name]
        if not mapping:
            self._store.pop(self._key, None)

    def __contains__(self, name: Any) -> bool:
        return name in self._map()

    def __len__(self) -> int:
        return len(self._map())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map().items())

    def keys(self) -> list[Any]:
        return list(self._map())

    def values(self) -> list[Any]:
        return list(self._map().values())

    def clear(self) -> None:
        self._store.pop(self._key, None)


class KeyedState:
    """The named states of one key (see the module docstring)."""

    def __init__(self, operator: "KeyedProcessOperator", key: Key) -> None:
        self._operator, self.key = operator, key

    def value(self, name: str, default: Any = None) -> ValueState:
        return ValueState(self._operator._store(name, _VALUE), self.key, default)

    def list(self, name: str) -> ListState:
        return ListState(self._operator._store(name, _LIST), self.key)

    def map(self, name: str) -> MapState:
        return MapState(self._operator._store(name, _MAP), self.key)


class KeyedProcessOperator(Operator):
    """Runs a keyed process function on each key's rows of each batch."""

    def __init__(self, key_columns: Sequence[str],
                 fn: KeyedProcessFunction | Callable[[Key, pa.RecordBatch, KeyedState], Any],
                 name: str = "process") -> None:
        if not (isinstance(fn, KeyedProcessFunction) or callable(fn)):
            raise TypeError(f"{name}: expected a function(key, rows, state) or a "
                            f"KeyedProcessFunction, not {type(fn).__name__}")
        self.key_columns = tuple(key_columns)
        self.fn = fn
        self.name = name
        self._states: dict[str, tuple[str, dict[Key, Any]]] = {}
        self._key_types: list[pa.DataType] | None = None

    def open(self, context: OperatorContext) -> None:
        super().open(context)
        self._states, self._key_types = {}, None
        if isinstance(self.fn, KeyedProcessFunction):
            self.fn.open(context)

    def _store(self, name: str, kind: str) -> dict[Key, Any]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.name}: a state's name is a non-empty string, not {name!r}")
        have = self._states.setdefault(name, (kind, {}))
        if have[0] != kind:
            raise ValueError(f"{self.name}: state {name!r} is {have[0]} state, not {kind} state")
        return have[1]

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        if batch.num_rows == 0:
            return ()
        names = batch.schema.names
        for column in self.key_columns:
            if column not in names:
                raise KeyError(f"{self.name}: the input has no column {column!r} (its "
                               f"columns: {', '.join(names)})")
        if self._key_types is None:
            self._key_types = [batch.schema.field(c).type for c in self.key_columns]
        out: list[pa.RecordBatch] = []
        for key, rows in _by_key(batch, self.key_columns):
            out.extend(self._emitted(self._call(key, rows), key))
        return out

    def _call(self, key: Key, rows: pa.RecordBatch) -> Any:
        state = KeyedState(self, key)
        if isinstance(self.fn, KeyedProcessFunction):
            return self.fn.process(key, rows, state)
        return self.fn(key, rows, state)

    def finish(self) -> Iterable[pa.RecordBatch]:
        if not isinstance(self.fn, KeyedProcessFunction):
            return ()
        keys = dict.fromkeys(k for _, store in self._states.values() for k in store)
        out: list[pa.RecordBatch] = []
        for key in keys:
            out.extend(self._emitted(self.fn.finish(key, KeyedState(self, key)), key))
        return out

    def _emitted(self, result: Any, key: Key) -> Iterator[pa.RecordBatch]:
        if result is None:
            return
        items = (result,) if isinstance(result, (pa.RecordBatch, pa.Table)) else result
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise TypeError(f"{self.name}: the function returned a {type(result).__name__} "
                            f"for key {key!r}, expected a pyarrow.RecordBatch or Table, an "
                            f"iterable of them, or None")
        for item in items:
            if isinstance(item, pa.RecordBatch):
                yield item
            elif isinstance(item, pa.Table):
                yield from item.to_batches()
            else:
                raise TypeError(f"{self.name}: the function returned a "
                                f"{type(item).__name__} among its results for key {key!r}, "
                                f"expected pyarrow.RecordBatch or Table")

    # ---- checkpoints ----------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        """One table per named state: the key columns and each key's pickled value."""
        tables = {}
        for name, (kind, store) in self._states.items():
            if not store or self._key_types is None:
                continue
            keys = list(store)
            columns = [pa.array([k[i] for k in keys], type=t)
                       for i, t in enumerate(self._key_types)]
            columns.append(pa.array([pickle.dumps(store[k], protocol=5) for k in keys],
                                    pa.binary()))
            schema = pa.schema([*(pa.field(c, t) for c, t in
                                  zip(self.key_columns, self._key_types)),
                                pa.field(_PAYLOAD, pa.binary())], metadata={_KIND: kind})
            tables[name] = pa.Table.from_arrays(columns, schema=schema)
        return tables

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        for name, table in state.items():
            kind = (table.schema.metadata or {}).get(_KIND, _VALUE.encode()).decode()
            store = self._store(name, kind)
            keys = zip(*(table.column(c).to_pylist() for c in self.key_columns))
            for key, payload in zip(keys, table.column(_PAYLOAD).to_pylist()):
                store[tuple(key)] = pickle.loads(payload)
            if self._key_types is None:
                self._key_types = [table.schema.field(c).type for c in self.key_columns]

    def state_redistribution(self, name: str) -> Redistribution:
        return key_groups.keyed(*self.key_columns)


def _by_key(batch: pa.RecordBatch, key_columns: Sequence[str]
            ) -> Iterator[tuple[Key, pa.RecordBatch]]:
    """Each distinct key of `batch` (first appearance first) with its rows, in order."""
    if len(key_columns) == 1:
        values = batch.column(key_columns[0]).to_pylist()
        keys: list[Key] = [(v,) for v in values]
    else:
        keys = list(zip(*(batch.column(c).to_pylist() for c in key_columns)))
    rows: dict[Key, list[int]] = {}
    for index, key in enumerate(keys):
        rows.setdefault(key, []).append(index)
    if len(rows) == 1:
        yield keys[0], batch
        return
    for key, indices in rows.items():
        yield key, batch.take(pa.array(indices, pa.int64()))
