-- Completion: function, macro and UDF names (operators and internal helpers left out);
-- the project's macros and UDFs first.
SELECT function_name, any_value(function_type) AS kind, bool_or(NOT internal) AS ours
FROM duckdb_functions()
WHERE regexp_matches(function_name, '^[A-Za-z][A-Za-z0-9_]*$')
GROUP BY function_name
ORDER BY ours DESC, function_name;
