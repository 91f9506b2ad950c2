-- The schema's own bookkeeping (warehouse/core/connection.py, _create_schema): a writable open
-- whose fingerprint matches the stored one changes nothing, so it writes nothing.

-- internal: fingerprint of the schema this database was last set up with
CREATE TABLE IF NOT EXISTS schema_version (
    -- hash of the bundled schema files (tables, columns and their descriptions); a writable open
    -- redoes the DDL when it differs
    fingerprint VARCHAR NOT NULL
);
