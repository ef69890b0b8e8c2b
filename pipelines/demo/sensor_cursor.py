"""After the demo has ingested its days, the source sensor's cursor says so: a fresh
`make ui` on the demo state starts no ingest by itself (without a saved cursor the
`new_source_objects` sensor takes yesterday's objects for new ones).

The cursor is the sensor's own: the sensor is evaluated once here on the demo's
source and its resulting cursor is saved as the sensor's state in the instance
`make ui` opens, under the code location `make ui` serves (pyproject's
``[tool.dagster] code_location_name``). Dagster finds a sensor's state by that
selector (location, repository, sensor name), so the saved state is the one its
daemon reads.
"""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.sensor_definition import SensorType
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteInstigatorOrigin, RemoteRepositoryOrigin
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorStatus,
    InstigatorType,
    SensorInstigatorData,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from pipelines.resources.object_store import ObjectStore

CODE_LOCATION = "tracelake"  # pyproject's [tool.dagster] code_location_name, what `make ui` serves
REPOSITORY = "__repository__"


def sensor_state(instance: dg.DagsterInstance, name: str, location: str = CODE_LOCATION) -> InstigatorState | None:
    """The saved state of sensor ``name`` of the code location, as Dagster's daemon looks it up."""
    return instance.get_instigator_state("", _origin(name, location).get_selector().get_id())


def _origin(name: str, location: str) -> RemoteInstigatorOrigin:
    target = LoadableTargetOrigin(module_name="pipelines.definitions")
    code = InProcessCodeLocationOrigin(target, location_name=location)
    return RemoteInstigatorOrigin(RemoteRepositoryOrigin(code, REPOSITORY), name)


def settle_source_sensor(
    instance: dg.DagsterInstance, source: ObjectStore, location: str = CODE_LOCATION
) -> str | None:
    """Save the cursor ``new_source_objects`` reaches on ``source`` now (what it would request,
    marked as requested); returns it. Its status stays the one declared in code (running).
    An instance that keeps no sensor state (ephemeral: no dagster.yaml here) is left alone."""
    if instance.schedule_storage is None:
        return None
    from pipelines.definitions import build
    from pipelines.sensors import new_source_objects

    # as a context manager: the resources it builds enter the instance, which sets Dagster's
    # current definitions-state storage; left open, that outlives the instance in this process
    with dg.build_sensor_context(instance=instance, resources={"source": source}, definitions=build()) as context:
        list(new_source_objects(context))
        cursor = context.cursor
    data = SensorInstigatorData(
        cursor=cursor,
        min_interval=new_source_objects.minimum_interval_seconds,
        sensor_type=SensorType.STANDARD,
    )
    saved = sensor_state(instance, new_source_objects.name, location)
    if saved is None:
        origin = _origin(new_source_objects.name, location)
        instance.add_instigator_state(
            InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.DECLARED_IN_CODE, data)
        )
    else:
        instance.update_instigator_state(saved.with_data(data))
    return cursor
