"""docs/tables.md and the README's table list are generated from record/schema.py:
the test fails when either drifts from what the schema module says."""

from pipelines.record import dictionary
from pipelines.record.schema import ALL


def test_the_data_dictionary_is_what_the_schema_module_generates():
    assert dictionary.DOCS.read_text() == dictionary.docs(), "run: python -m pipelines.record.dictionary"


def test_the_readme_table_list_is_what_the_schema_module_generates():
    readme = dictionary.README.read_text()
    assert dictionary.readme_with_tables(readme) == readme, "run: python -m pipelines.record.dictionary"
    for table in ALL:
        assert f"| `{table.name}` |" in readme


def test_every_column_has_a_meaning_and_every_table_a_row():
    for table in ALL:
        assert table.row.startswith("One row per "), table.name
        assert set(table.key) <= {c.name for c in table.columns}, table.name
        assert set(table.partitioned_by) <= {c.name for c in table.columns}, table.name
        assert set(table.references) <= {c.name for c in table.columns}, table.name
        names = [c.name for c in table.columns]
        assert len(names) == len(set(names)), table.name
        for column in table.columns:
            assert column.meaning.strip() and column.example is not None, f"{table.name}.{column.name}"
