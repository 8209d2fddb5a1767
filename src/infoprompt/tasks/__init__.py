"""Task registry: the named tasks, their readers and few-shot sampling."""

from __future__ import annotations

from infoprompt.errors import UserError
from infoprompt.suggest import unknown_name
from infoprompt.tasks.base import (
    DATA_DIR_ENV,
    Example,
    TaskSpec,
    load_hub_split,
    load_split,
    resolve_data_dir,
)
from infoprompt.tasks.entity import ENTITY_TASKS
from infoprompt.tasks.files import FileColumns, check_eval_labels, collect_labels, read_labelled_file
from infoprompt.tasks.glue import GLUE_TASKS
from infoprompt.tasks.marked import MARKED_TASKS
from infoprompt.tasks.multilabel import label_set, sample_few_shot_multilabel
from infoprompt.tasks.relation import RELATION_TASKS
from infoprompt.tasks.sampling import sample_few_shot
from infoprompt.tasks.user_task import (
    UserTask,
    is_multi_label,
    task_from_file,
    task_from_json,
    task_to_json,
    user_task,
)

TASKS: dict[str, TaskSpec] = {task.name: task for task in (*GLUE_TASKS, *RELATION_TASKS, *ENTITY_TASKS, *MARKED_TASKS)}
# The tasks this package ships, which adapters name without carrying them (TASKS also holds registered ones).
BUILTIN_TASKS: dict[str, TaskSpec] = dict(TASKS)


def register_task(task: TaskSpec) -> None:
    """Add a task to the registry (used by task modules and by users with their own data)."""
    TASKS[task.name] = task


def get_task(name: str) -> TaskSpec:
    """The task ``name``; an unknown name is a one-line error with the closest valid one."""
    try:
        return TASKS[name]
    except KeyError:
        raise UserError(unknown_name("task", name, sorted(TASKS))) from None


__all__ = [
    "BUILTIN_TASKS",
    "DATA_DIR_ENV",
    "Example",
    "FileColumns",
    "TASKS",
    "TaskSpec",
    "UserTask",
    "check_eval_labels",
    "collect_labels",
    "get_task",
    "is_multi_label",
    "label_set",
    "load_hub_split",
    "load_split",
    "read_labelled_file",
    "register_task",
    "resolve_data_dir",
    "sample_few_shot",
    "sample_few_shot_multilabel",
    "task_from_file",
    "task_from_json",
    "task_to_json",
    "user_task",
]
